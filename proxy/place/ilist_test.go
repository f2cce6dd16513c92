package place

import (
	"slices"
	"testing"
)

type node struct {
	id   int
	a, b link[node]
}

func order(l *ilist[node]) (fwd, back []int) {
	for x := l.head; x != nil; x = l.next(x) {
		fwd = append(fwd, x.id)
	}
	for x := l.tail; x != nil; x = l.prev(x) {
		back = append(back, x.id)
	}
	return fwd, back
}

func TestIlistKeepsRecencyOrderOnTwoListsAtOnce(t *testing.T) {
	la := ilist[node]{at: func(n *node) *link[node] { return &n.a }}
	lb := ilist[node]{at: func(n *node) *link[node] { return &n.b }}
	ns := []*node{{id: 1}, {id: 2}, {id: 3}}
	for _, n := range ns {
		la.pushFront(n)
		lb.pushFront(n)
	}
	la.moveFront(ns[0]) // a: 1 3 2
	lb.unlink(ns[1])    // b: 3 1
	lb.unlink(ns[1])    // not on b: no-op
	la.unlink(ns[2])    // a: 1 2
	la.moveFront(ns[0]) // already head
	for _, tc := range []struct {
		name string
		l    *ilist[node]
		want []int
	}{{"a", &la, []int{1, 2}}, {"b", &lb, []int{3, 1}}} {
		fwd, back := order(tc.l)
		slices.Reverse(back)
		if !slices.Equal(fwd, tc.want) || !slices.Equal(back, tc.want) {
			t.Errorf("list %s: forward %v, backward (reversed) %v, want %v", tc.name, fwd, back, tc.want)
		}
	}
	la.unlink(ns[0])
	la.unlink(ns[1])
	if la.head != nil || la.tail != nil {
		t.Errorf("emptied list still has head %v tail %v", la.head, la.tail)
	}
}
