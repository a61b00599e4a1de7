package main

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"time"
)

// The honest client of a flood row: one id that asks at a steady rate,
// well within its share, from before the flood's warm-up until the run
// ends, as a well-behaved client of the service would while the flood goes
// on. The share of its requests admitted while a round is measured is the
// row's "honest" column. Its requests reach Envoy during the measured
// interval, at honestEvery against thousands a second from wrk: their CPU
// is within the row's noise.

const (
	honestID = "honest-client"
	// honestEvery: 5 requests a second, half the equal share of 100,000 a
	// second over a full table of 10,000 clients.
	honestEvery = 200 * time.Millisecond
	// honestRegister bounds the wait for its first 200: a newcomer is
	// counted when the next window's plan is made.
	honestRegister = 30 * time.Second
)

// honest is a running honest client and what its requests got.
type honest struct {
	sent, ok atomic.Uint64
	stop     chan struct{}
	done     chan struct{}
}

// startHonest registers in's honest client (it asks until it is admitted)
// and keeps it asking every honestEvery until stop.
func startHonest(in *instance) (*honest, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(honestRegister)
	for {
		status, _, err := ask(client, in, honestID)
		if err == nil && status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: the honest client was not admitted within %s (last answer: status %d, error %v)", in.name, honestRegister, status, err)
		}
		time.Sleep(honestEvery)
	}
	h := &honest{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		defer client.CloseIdleConnections()
		tick := time.NewTicker(honestEvery)
		defer tick.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
			status, _, err := ask(client, in, honestID)
			h.sent.Add(1)
			if err == nil && status == http.StatusOK {
				h.ok.Add(1)
			}
		}
	}()
	return h, nil
}

// counts are the requests the honest client has sent and had admitted.
func (h *honest) counts() (sent, ok uint64) { return h.sent.Load(), h.ok.Load() }

// close stops the honest client and waits for its last request.
func (h *honest) close() {
	close(h.stop)
	<-h.done
}
