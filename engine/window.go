package engine

import "time"

// WindowAt returns the aligned window that t falls in: window k spans
// [k·cycle + offset, (k+1)·cycle + offset) on the Unix epoch. Every worker and
// every replica with the same cycle and offset agrees on it without talking
// to anyone, and the end of the running window never moves. cycle must be
// positive.
func WindowAt(t time.Time, cycle, offset time.Duration) (index int64, start, end time.Time) {
	ns := t.UnixNano() - int64(offset)
	c := int64(cycle)
	index = ns / c
	if ns%c < 0 { // floor division for times before the epoch
		index--
	}
	startNs := index*c + int64(offset)
	return index, time.Unix(0, startNs), time.Unix(0, startNs+c)
}
