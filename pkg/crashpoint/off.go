//go:build !sluice_crashpoints

package crashpoint

// Hit does nothing: this build cannot crash on purpose.
func Hit(string) {}
