package wasmhost

import "sync"

// Picker chooses the worker VM for request i. Envoy's workers take
// connections in an order nobody controls; a test chooses round-robin, or a
// seeded random order it can replay.
type Picker func(i int) int

// RoundRobin sends request i to VM i mod vms.
func RoundRobin(vms int) Picker {
	return func(i int) int { return i % vms }
}

// Seeded sends each request to a pseudo-random VM: a pure function of seed
// and i, so the assignment is reproducible whatever the goroutine timing.
func Seeded(vms int, seed uint64) Picker {
	return func(i int) int { return int(splitmix64(seed+uint64(i)) % uint64(vms)) }
}

// splitmix64 is a standard 64-bit mixer: consecutive inputs give unrelated
// outputs.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// Drive sends n requests through the VMs concurrently, one goroutine per VM,
// each VM taking its requests in index order. req(i) builds request i and
// done(i, result) receives its result; both run on the VM's goroutine, so
// they must be safe for concurrent use. done may be nil.
func (h *Host) Drive(n int, pick Picker, req func(i int) [][2]string, done func(i int, r Result)) {
	queues := make([]chan int, len(h.vms))
	var wg sync.WaitGroup
	for v := range queues {
		queues[v] = make(chan int, 256)
		wg.Add(1)
		go func(vm *VM, q <-chan int) {
			defer wg.Done()
			for i := range q {
				r := vm.do(req(i))
				if done != nil {
					done(i, r)
				}
			}
		}(h.vms[v], queues[v])
	}
	for i := 0; i < n; i++ {
		queues[pick(i)] <- i
	}
	for _, q := range queues {
		close(q)
	}
	wg.Wait()
}

// DriveAll sends every request in reqs concurrently (see Drive) and returns
// the results in the same order.
func (h *Host) DriveAll(reqs [][][2]string, pick Picker) []Result {
	out := make([]Result, len(reqs))
	h.Drive(len(reqs), pick, func(i int) [][2]string { return reqs[i] },
		func(i int, r Result) { out[i] = r })
	return out
}
