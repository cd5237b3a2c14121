// Command crashpoint passes the crash point "harness/test" and says so; a
// harness test builds it with and without the sluice_crashpoints tag.
package main

import (
	"fmt"

	"github.com/sluice-dev/sluice/pkg/crashpoint"
)

func main() {
	crashpoint.Hit("harness/test")
	fmt.Println("passed harness/test")
}
