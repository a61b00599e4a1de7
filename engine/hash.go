package engine

// hash64 is 64-bit FNV-1a. Clients are identified in shared state by the hash
// of their id: fixed-size entries keep buckets compact whatever the ids
// look like. Ids are not secrets (any caller can send any id), so a keyed hash
// would buy nothing; 64 bits make accidental collisions negligible for the
// bounded client table (about 3e-10 for 100,000 clients).
type hash64 uint64

const (
	fnvOffset hash64 = 14695981039346656037
	fnvPrime  hash64 = 1099511628211
)

func newHash() hash64 { return fnvOffset }

func (h hash64) addString(s string) hash64 {
	for i := 0; i < len(s); i++ {
		h ^= hash64(s[i])
		h *= fnvPrime
	}
	return h
}

// clientHash maps an id to its non-zero hash; zero marks a free slot.
func clientHash(id string) uint64 {
	h := uint64(newHash().addString(id))
	if h == 0 {
		return 1
	}
	return h
}
