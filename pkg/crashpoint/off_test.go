//go:build !sluice_crashpoints

package crashpoint

import "testing"

// In a normal build a point named in the environment must not crash.
func TestHitIsHarmlessWithoutTag(t *testing.T) {
	t.Setenv(EnvVar, "test/point")
	Hit("test/point")
	Hit("other/point")
	if testing.AllocsPerRun(100, func() { Hit("test/point") }) != 0 {
		t.Error("Hit allocates in a normal build, want a no-op")
	}
}
