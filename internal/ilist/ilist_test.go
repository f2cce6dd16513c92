package ilist

import (
	"slices"
	"testing"
)

type node struct {
	id   int
	a, b Link[node]
}

func order(l *List[node]) (fwd, back []int) {
	for x := l.Front(); x != nil; x = l.Next(x) {
		fwd = append(fwd, x.id)
	}
	for x := l.Back(); x != nil; x = l.Prev(x) {
		back = append(back, x.id)
	}
	return fwd, back
}

// check fails unless l holds want from front to back, walked both ways,
// with Len and Contains agreeing.
func check(t *testing.T, name string, l *List[node], want []int, all []*node) {
	t.Helper()
	fwd, back := order(l)
	slices.Reverse(back)
	if !slices.Equal(fwd, want) || !slices.Equal(back, want) || l.Len() != len(want) {
		t.Errorf("list %s: forward %v, backward (reversed) %v, len %d; want %v", name, fwd, back, l.Len(), want)
	}
	for _, n := range all {
		if got := l.Contains(n); got != slices.Contains(want, n.id) {
			t.Errorf("list %s: Contains(%d) = %v", name, n.id, got)
		}
	}
}

func TestListKeepsOrderOnTwoListsAtOnce(t *testing.T) {
	la := New(func(n *node) *Link[node] { return &n.a })
	lb := New(func(n *node) *Link[node] { return &n.b })
	ns := []*node{{id: 1}, {id: 2}, {id: 3}}
	for _, n := range ns {
		la.PushFront(n)
		lb.PushFront(n)
	}
	la.MoveToFront(ns[0]) // a: 1 3 2
	lb.Remove(ns[1])      // b: 3 1
	lb.Remove(ns[1])      // not on b: no-op
	la.Remove(ns[2])      // a: 1 2
	la.MoveToFront(ns[0]) // already first
	check(t, "a", &la, []int{1, 2}, ns)
	check(t, "b", &lb, []int{3, 1}, ns)
	la.Remove(ns[0])
	la.Remove(ns[1])
	if la.Front() != nil || la.Back() != nil || la.Len() != 0 {
		t.Errorf("emptied list still has front %v back %v len %d", la.Front(), la.Back(), la.Len())
	}
}

func TestListBackOperations(t *testing.T) {
	l := New(func(n *node) *Link[node] { return &n.a })
	ns := []*node{{id: 1}, {id: 2}, {id: 3}, {id: 4}}
	for _, n := range ns[:3] {
		l.PushBack(n) // 1 2 3
	}
	l.PushFront(ns[3]) // 4 1 2 3
	check(t, "pushed", &l, []int{4, 1, 2, 3}, ns)
	l.MoveToBack(ns[1]) // 4 1 3 2
	l.MoveToBack(ns[1]) // already last
	l.MoveToBack(ns[3]) // 1 3 2 4
	check(t, "moved", &l, []int{1, 3, 2, 4}, ns)
	l.Clear()
	check(t, "cleared", &l, nil, ns)
	for _, n := range ns {
		if n.a != (Link[node]{}) {
			t.Errorf("node %d keeps links after Clear", n.id)
		}
	}
	l.PushBack(ns[2]) // reusable after Clear
	check(t, "refilled", &l, []int{3}, ns)
}
