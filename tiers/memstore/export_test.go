package memstore

// Len reports how many bucket states the Store holds, expired ones not yet
// removed included.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.t.used
		sh.mu.Unlock()
	}
	return n
}
