package server

import (
	"io"
	"testing"
	"time"
)

// TestReadPrefaceShort: a request shorter than the HTTP/2 preface that
// differs from it is told apart at its first differing byte, without
// waiting for more (the connection stays open: a read past it blocks).
func TestReadPrefaceShort(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	go pw.Write([]byte("HELLO\r\n\r\n"))
	got := make(chan bool, 1)
	go func() { got <- readPreface(pr) }()
	select {
	case ok := <-got:
		if ok {
			t.Fatal("readPreface(HELLO) = true")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("readPreface(HELLO) still reading after 10s")
	}
}
