package tiers

import (
	"crypto/sha256"
	"encoding/hex"
	"hash/maphash"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

func wantHashed(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "#" + hex.EncodeToString(sum[:hashBytes])
}

// TestAPIKeyCache: an API key's key form is the same on a miss, on a hit
// and after its slot was taken by other keys, for keys of every length
// around the cache's limit, from several goroutines at once (run with
// -race).
func TestAPIKeyCache(t *testing.T) {
	keys := []string{"k", "k-123", strings.Repeat("a", maxCachedKey-1), strings.Repeat("a", maxCachedKey),
		strings.Repeat("a", maxCachedKey+1), strings.Repeat("\xff", 300), "k\x00", "k\x00\x00"}
	// More distinct keys than slots, so slots are shared and evicted.
	for i := range 3 * hashCacheSlots {
		keys = append(keys, "key-"+strconv.Itoa(i))
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kb := newKeyBuilder()
			for round := range 3 {
				for i := range keys {
					k := keys[(i+g*len(keys)/4)%len(keys)]
					got := string(kb.appendAPIKey([]byte("x="), k))
					if want := "x=" + wantHashed(k); got != want {
						t.Errorf("goroutine %d round %d: key %q: got %q, want %q", g, round, k, got, want)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// TestAPIKeyCacheBounded: keys longer than maxCachedKey are never stored,
// and a hit needs the exact key (same length, same bytes).
func TestAPIKeyCacheBounded(t *testing.T) {
	c := &hashCache{seed: maphash.MakeSeed()}
	long := strings.Repeat("z", maxCachedKey+1)
	h, _, ok := c.lookup(nil, long)
	if ok {
		t.Fatal("lookup of an uncached long key hit")
	}
	c.store(h, long, []byte(wantHashed(long)[1:]))
	for i := range c.slots {
		if c.slots[i].taken() {
			t.Fatalf("slot %d holds a key longer than %d bytes", i, maxCachedKey)
		}
	}
	h, _, _ = c.lookup(nil, "abc")
	c.store(h, "abc", []byte(wantHashed("abc")[1:]))
	if _, b, ok := c.lookup(nil, "abc"); !ok || "#"+string(b) != wantHashed("abc") {
		t.Fatalf("lookup(abc) = %q, %v", b, ok)
	}
	for _, s := range []string{"ab", "abcd", "abC", "abc\x00"} {
		if _, _, ok := c.lookup(nil, s); ok {
			t.Errorf("lookup(%q) hit the entry of \"abc\"", s)
		}
	}
}

// TestKeysCache: get always returns the bytes it was given; a repeat gets
// the cached string (no allocation); key sets longer than maxCachedKeys
// are never cached; concurrent use is safe (run with -race).
func TestKeysCache(t *testing.T) {
	c := &keysCache{seed: maphash.MakeSeed()}
	b := []byte("fg:{user=u}:users:token_bucket")
	first := c.get(b)
	if first != string(b) {
		t.Fatalf("get = %q, want %q", first, b)
	}
	if again := c.get(b); unsafe.StringData(again) != unsafe.StringData(first) {
		t.Error("a repeat did not return the cached string")
	}
	if n := testing.AllocsPerRun(100, func() { _ = c.get(b) }); n != 0 {
		t.Errorf("a hit allocates %v times", n)
	}
	b[len(b)-1] = 'X' // the cached string must not change with the buffer
	if first != "fg:{user=u}:users:token_bucket" {
		t.Fatalf("cached string changed to %q", first)
	}
	long := []byte(strings.Repeat("k", maxCachedKeys+1))
	_ = c.get(long)
	for i := range c.slots {
		if e := c.slots[i].e.Load(); e != nil && len(e.keys) > maxCachedKeys {
			t.Fatalf("slot %d holds %d bytes", i, len(e.keys))
		}
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for i := range 4 * keysCacheSlots {
				buf = strconv.AppendInt(append(buf[:0], "fg:{user="...), int64((i*7+g)%(3*keysCacheSlots)), 10)
				if got := c.get(buf); got != string(buf) {
					t.Errorf("get(%q) = %q", buf, got)
					return
				}
			}
		}()
	}
	wg.Wait()
}
