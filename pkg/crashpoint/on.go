//go:build sluice_crashpoints

package crashpoint

import (
	"fmt"
	"os"
	"syscall"
	"time"
)

// Hit kills the process with SIGKILL when SLUICE_CRASHPOINT equals name.
// Nothing else runs after it: no deferred function, no shutdown hook, no
// buffered write, exactly as if the machine had lost the process there.
func Hit(name string) {
	if armed := os.Getenv(EnvVar); armed == "" || armed != name {
		return
	}
	fmt.Fprintf(os.Stderr, "crashpoint %s: killing the process\n", name)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	// The signal is delivered before kill returns to user space; never hand
	// control back to the caller meanwhile. A sleep, not select{}, so the
	// runtime's deadlock detector cannot turn this into an exit of its own.
	for {
		time.Sleep(time.Hour)
	}
}
