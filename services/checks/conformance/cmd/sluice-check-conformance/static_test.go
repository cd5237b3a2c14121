package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// TestStaticBinary builds the command as `make build` and `make kit` do,
// with CGO_ENABLED=0, and checks that the result is statically linked: a
// vendor downloads it and runs it on any Linux, with no libc to match.
func TestStaticBinary(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not in PATH")
	}
	bin := filepath.Join(t.TempDir(), "sluice-check-conformance")
	build := exec.Command(gobin, "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build with CGO_ENABLED=0: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	loads := 0
	for _, p := range f.Progs {
		switch p.Type {
		case elf.PT_INTERP:
			t.Error("the binary has a PT_INTERP program header: it is dynamically linked and needs a loader")
		case elf.PT_LOAD:
			loads++
		}
	}
	if loads == 0 {
		t.Fatal("the binary has no PT_LOAD program header: not an executable")
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v", libs)
	}
}
