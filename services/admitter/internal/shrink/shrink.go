// Package shrink gives back the memory of the admitter's per-workload
// maps once they are empty. A Go map keeps the room of the most entries
// it ever held for as long as it lives, so a map that held every workload
// of a burst would hold that room after the burst has drained; a fresh
// map in its place lets the collector take it.
package shrink

// Delete deletes key from the map m points to and, when that takes the
// map's last entry, replaces it with a fresh one. A fresh map costs one
// small allocation, so it is made only when the map becomes empty, not
// for every deletion from an empty one.
func Delete[M ~map[K]V, K comparable, V any](m *M, key K) {
	had := len(*m)
	delete(*m, key)
	if had > 0 && len(*m) == 0 {
		*m = make(M)
	}
}
