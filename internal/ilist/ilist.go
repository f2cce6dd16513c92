// Package ilist is an intrusive doubly linked list: its elements carry
// their own links, so pushing and removing allocate nothing, and one value
// can sit on several lists (one Link field each). It is a leaf: it imports
// nothing.
package ilist

// Link is one list membership of a *T: its neighbours on that list. The
// zero Link is off the list.
type Link[T any] struct{ prev, next *T }

// List is a doubly linked list of *T, from Front to Back. at returns an
// element's Link for this list. The zero List is unusable: make one with
// New. Not safe for concurrent use.
type List[T any] struct {
	front, back *T
	n           int
	at          func(*T) *Link[T]
}

// New returns an empty list whose elements keep their Link for it where
// at says.
func New[T any](at func(*T) *Link[T]) List[T] { return List[T]{at: at} }

// Len is the number of elements on the list.
func (l *List[T]) Len() int { return l.n }

// Front is the first element, nil when the list is empty.
func (l *List[T]) Front() *T { return l.front }

// Back is the last element, nil when the list is empty.
func (l *List[T]) Back() *T { return l.back }

// Next is the element after x (towards Back), nil at the end.
func (l *List[T]) Next(x *T) *T { return l.at(x).next }

// Prev is the element before x (towards Front), nil at the start.
func (l *List[T]) Prev(x *T) *T { return l.at(x).prev }

// Contains reports whether x is on the list. x must be on this list or
// on none that keeps its Link in the same place.
func (l *List[T]) Contains(x *T) bool { return l.at(x).prev != nil || l.front == x }

// PushFront puts x, which must not be on the list, first.
func (l *List[T]) PushFront(x *T) {
	lx := l.at(x)
	lx.prev, lx.next = nil, l.front
	if l.front != nil {
		l.at(l.front).prev = x
	} else {
		l.back = x
	}
	l.front = x
	l.n++
}

// PushBack puts x, which must not be on the list, last.
func (l *List[T]) PushBack(x *T) {
	lx := l.at(x)
	lx.prev, lx.next = l.back, nil
	if l.back != nil {
		l.at(l.back).next = x
	} else {
		l.front = x
	}
	l.back = x
	l.n++
}

// Remove takes x off the list; a no-op when x is not on it.
func (l *List[T]) Remove(x *T) {
	lx := l.at(x)
	if lx.prev == nil && l.front != x {
		return
	}
	if lx.prev != nil {
		l.at(lx.prev).next = lx.next
	} else {
		l.front = lx.next
	}
	if lx.next != nil {
		l.at(lx.next).prev = lx.prev
	} else {
		l.back = lx.prev
	}
	lx.prev, lx.next = nil, nil
	l.n--
}

// MoveToFront makes x, which must be on the list, its first element.
func (l *List[T]) MoveToFront(x *T) {
	if l.front == x {
		return
	}
	l.Remove(x)
	l.PushFront(x)
}

// MoveToBack makes x, which must be on the list, its last element.
func (l *List[T]) MoveToBack(x *T) {
	if l.back == x {
		return
	}
	l.Remove(x)
	l.PushBack(x)
}

// Clear takes every element off the list.
func (l *List[T]) Clear() {
	for x := l.front; x != nil; {
		lx := l.at(x)
		x, lx.prev, lx.next = lx.next, nil, nil
	}
	l.front, l.back, l.n = nil, nil, 0
}
