package memstore

// ring is a sliding window log: runs of (timestamp, count), oldest first,
// in a circular buffer that grows by doubling.
type ring struct {
	buf   []stamp
	head  int
	size  int
	total int64
}

type stamp struct{ t, n int64 }

func (r *ring) at(i int) *stamp { return &r.buf[(r.head+i)%len(r.buf)] }

func (r *ring) newest() int64 { return r.at(r.size - 1).t }

func (r *ring) clear() { r.head, r.size, r.total = 0, 0, 0 }

// dropThrough removes every run with timestamp <= cut.
func (r *ring) dropThrough(cut int64) {
	for r.size > 0 {
		s := r.at(0)
		if s.t > cut {
			return
		}
		r.total -= s.n
		r.head = (r.head + 1) % len(r.buf)
		r.size--
	}
}

// kth returns the timestamp of the k-th oldest unit (k >= 1).
func (r *ring) kth(k int64) int64 {
	for i := 0; i < r.size; i++ {
		s := r.at(i)
		if k <= s.n {
			return s.t
		}
		k -= s.n
	}
	return r.newest()
}

// add records n units at t, keeping runs sorted by timestamp.
func (r *ring) add(t, n int64) {
	r.total += n
	if r.size > 0 {
		last := r.at(r.size - 1)
		if last.t == t {
			last.n += n
			return
		}
		if last.t > t {
			r.insertSorted(t, n)
			return
		}
	}
	if r.size == len(r.buf) {
		r.grow(r.size + 1)
	}
	*r.at(r.size) = stamp{t, n}
	r.size++
}

func (r *ring) grow(min int) {
	c := max(4, 2*len(r.buf), min)
	nb := make([]stamp, c)
	for i := 0; i < r.size; i++ {
		nb[i] = *r.at(i)
	}
	r.buf, r.head = nb, 0
}

// insertSorted handles a timestamp older than the newest run (the clock
// went backwards): rare, so it simply rebuilds the buffer.
func (r *ring) insertSorted(t, n int64) {
	nb := make([]stamp, 0, max(4, 2*(r.size+1)))
	placed := false
	for i := 0; i < r.size; i++ {
		s := *r.at(i)
		if !placed && s.t >= t {
			if s.t == t {
				s.n += n
			} else {
				nb = append(nb, stamp{t, n})
			}
			placed = true
		}
		nb = append(nb, s)
	}
	r.size = len(nb)
	r.buf, r.head = nb[:cap(nb)], 0
}
