package scheduler

import "container/heap"

// indexedHeap is a container/heap whose items keep their own position in
// it (the field at points to; -1 once out), so any of them can be removed
// or moved in O(log n). Its zero value needs less and at set.
type indexedHeap[T comparable] struct {
	items []T
	less  func(a, b T) bool
	at    func(item T) *int
}

func (h *indexedHeap[T]) Len() int           { return len(h.items) }
func (h *indexedHeap[T]) Less(i, j int) bool { return h.less(h.items[i], h.items[j]) }
func (h *indexedHeap[T]) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	*h.at(h.items[i]) = i
	*h.at(h.items[j]) = j
}
func (h *indexedHeap[T]) Push(x any) {
	item := x.(T)
	*h.at(item) = len(h.items)
	h.items = append(h.items, item)
}
func (h *indexedHeap[T]) Pop() any {
	n := len(h.items) - 1
	item := h.items[n]
	var zero T
	h.items[n] = zero
	h.items = h.items[:n]
	*h.at(item) = -1
	return item
}

func (h *indexedHeap[T]) push(item T) { heap.Push(h, item) }

// contains reports whether item is in h (its index may be another heap's).
func (h *indexedHeap[T]) contains(item T) bool {
	i := *h.at(item)
	return i >= 0 && i < len(h.items) && h.items[i] == item
}

func (h *indexedHeap[T]) remove(item T) {
	if h.contains(item) {
		heap.Remove(h, *h.at(item))
	}
}

// fix restores the order after item's key changed.
func (h *indexedHeap[T]) fix(item T) {
	if h.contains(item) {
		heap.Fix(h, *h.at(item))
	}
}

// peek is the first item, or the zero value when h is empty.
func (h *indexedHeap[T]) peek() T {
	if len(h.items) == 0 {
		var zero T
		return zero
	}
	return h.items[0]
}
