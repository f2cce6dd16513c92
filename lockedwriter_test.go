package main

import (
	"bytes"
	"sync"
)

// lockedWriter lets a test read a buffer a subprocess is writing to.
type lockedWriter struct {
	mu  sync.Mutex
	buf *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}
