package place

// link is one list membership of a *T: its neighbours on that list.
type link[T any] struct{ prev, next *T }

// ilist is an intrusive doubly linked list, most recently used at head.
// Its elements carry their own links (no allocation per push), and at
// returns an element's link for this list, so one value can sit on several
// lists. at must be set before use. Not safe for concurrent use.
type ilist[T any] struct {
	head, tail *T
	at         func(*T) *link[T]
}

// pushFront puts x, which must not be on the list, at the head.
func (l *ilist[T]) pushFront(x *T) {
	lx := l.at(x)
	lx.prev, lx.next = nil, l.head
	if l.head != nil {
		l.at(l.head).prev = x
	}
	l.head = x
	if l.tail == nil {
		l.tail = x
	}
}

// unlink removes x from the list; a no-op when x is not on it.
func (l *ilist[T]) unlink(x *T) {
	lx := l.at(x)
	if lx.prev == nil && l.head != x {
		return
	}
	if lx.prev != nil {
		l.at(lx.prev).next = lx.next
	} else {
		l.head = lx.next
	}
	if lx.next != nil {
		l.at(lx.next).prev = lx.prev
	} else {
		l.tail = lx.prev
	}
	lx.prev, lx.next = nil, nil
}

// moveFront makes x, which must be on the list, its head.
func (l *ilist[T]) moveFront(x *T) {
	if l.head == x {
		return
	}
	l.unlink(x)
	l.pushFront(x)
}

// next is the element after x (towards the least recently used), or nil.
func (l *ilist[T]) next(x *T) *T { return l.at(x).next }

// prev is the element before x (towards the most recently used), or nil.
func (l *ilist[T]) prev(x *T) *T { return l.at(x).prev }
