package engine

import (
	"reflect"
	"testing"
)

// The garbage collector skips the client table only while a state holds no
// pointer: a field that adds one makes every collection mark every client
// again.
func TestClientStateHasNoPointers(t *testing.T) {
	var check func(reflect.Type, string)
	check = func(ty reflect.Type, path string) {
		switch ty.Kind() {
		case reflect.Pointer, reflect.Map, reflect.Slice, reflect.String, reflect.Interface, reflect.Chan, reflect.Func, reflect.UnsafePointer:
			t.Errorf("clientState%s is a %s: the garbage collector would scan every state", path, ty.Kind())
		case reflect.Struct:
			for i := range ty.NumField() {
				f := ty.Field(i)
				check(f.Type, path+"."+f.Name)
			}
		case reflect.Array:
			check(ty.Elem(), path+"[]")
		}
	}
	check(reflect.TypeOf(clientState{}), "")
}

func TestClientTableGenerations(t *testing.T) {
	tab := newClientTable()
	a := tab.put(1, 0)
	if got, older := tab.find(1); got != a || older {
		t.Fatalf("find after put: %p older=%v, want %p", got, older, a)
	}
	tab.newWindow(true)
	if got, older := tab.find(1); got != a || !older {
		t.Fatalf("the window after: %p older=%v, want %p of the generation before", got, older, a)
	}
	tab.renew(a)
	tab.newWindow(true)
	if got, older := tab.find(1); got != a || !older {
		t.Fatalf("renewed, the window after: %p older=%v, want %p", got, older, a)
	}
	tab.newWindow(true)
	if got, _ := tab.find(1); got != nil {
		t.Fatalf("two windows unseen: %p, want none", got)
	}
	tab.put(2, 0)
	tab.newWindow(false)
	if got, _ := tab.find(2); got != nil {
		t.Fatalf("after a window that does not follow: %p, want none", got)
	}
	tab.put(3, 0)
	tab.clear()
	if got, _ := tab.find(3); got != nil {
		t.Fatalf("after clear: %p, want none", got)
	}
}

// Slots of states no lookup finds are reused, but not while the tick's list
// or a closing writes' list still to be walked reaches them.
func TestClientTableReusesOnlyUnreachableSlots(t *testing.T) {
	tab := newClientTable()
	const n = 3 * chunkSlots
	for h := uint64(1); h <= n; h++ {
		tab.put(h, 0)
	}
	dirty := tab.at(5)
	dirty.dirty = true
	listed := tab.at(6)
	listed.deferred = 42
	tab.newWindow(false) // every state is unfindable now
	for h := uint64(n + 1); h <= 3*n; h++ {
		cs := tab.put(h, 42)
		if cs == dirty || cs == listed {
			t.Fatalf("put(%d) reused the slot of a state still reachable", h)
		}
		if cs.hash != h || cs.gen != tab.gen || cs.dirty || cs.deferred != 0 {
			t.Fatalf("put(%d) returned %+v, not a fresh state", h, *cs)
		}
	}
	if tab.used > 2*n+2 {
		t.Errorf("%d slots used for %d live states after %d dropped: slots of dropped states are not reused", tab.used, 2*n, n)
	}
	for h := uint64(1); h <= n; h++ {
		if cs, _ := tab.find(h); cs != nil {
			t.Fatalf("dropped state %d found", h)
		}
	}
	for h := uint64(n + 1); h <= 3*n; h++ {
		if cs, _ := tab.find(h); cs == nil || cs.hash != h {
			t.Fatalf("state %d: %v", h, cs)
		}
	}
}
