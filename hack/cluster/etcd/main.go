// Command etcd is etcd's own server entry point, built from its Go module at
// the version pinned in go.mod so the local control plane needs no download
// of a prebuilt binary.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
