package shrink

import (
	"runtime"
	"testing"
)

func TestDelete(t *testing.T) {
	tests := []struct {
		name     string
		entries  []int
		delete   []int
		wantLen  int
		wantSame bool // m still points to the map it pointed to before
	}{
		{name: "entries left", entries: []int{1, 2, 3}, delete: []int{2}, wantLen: 2, wantSame: true},
		{name: "absent key", entries: []int{1}, delete: []int{7}, wantLen: 1, wantSame: true},
		{name: "emptied", entries: []int{1, 2}, delete: []int{1, 2}, wantLen: 0},
		{name: "already empty", delete: []int{1}, wantLen: 0, wantSame: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := map[int]string{}
			for _, k := range tt.entries {
				m[k] = "v"
			}
			orig := m
			for _, k := range tt.delete {
				Delete(&m, k)
			}
			if len(m) != tt.wantLen {
				t.Errorf("len = %d, want %d", len(m), tt.wantLen)
			}
			orig[-1] = "marker" // only visible through m if m is still orig
			if _, same := m[-1]; same != tt.wantSame {
				t.Errorf("m is the original map: %t, want %t", same, tt.wantSame)
			}
		})
	}
}

// TestDeleteGivesTheRoomBack fills a map, empties it with Delete, and
// checks that the collector can take back what the full map held.
func TestDeleteGivesTheRoomBack(t *testing.T) {
	const n = 200_000
	type value [64]byte
	heapInUse := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heapInUse()
	m := map[int]value{}
	for i := range n {
		m[i] = value{}
	}
	full := heapInUse()
	for i := range n {
		Delete(&m, i)
	}
	emptied := heapInUse()
	held := full - before
	if left := emptied - min(emptied, before); left > held/10 {
		t.Errorf("after emptying, %d bytes of the full map's %d are still held", left, held)
	}
	runtime.KeepAlive(m)
}
