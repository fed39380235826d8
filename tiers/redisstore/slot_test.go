package redisstore

import (
	"strings"
	"testing"
)

// Known slots from the Redis Cluster specification and CLUSTER KEYSLOT.
func TestSlotKnown(t *testing.T) {
	cases := map[string]int{
		"123456789":            12739, // CRC16/XMODEM check value 0x31C3 mod 16384
		"foo":                  12182,
		"{user1000}.following": 3443,
		"{user1000}.followers": 3443,
		"foo{}{bar}":           Slot("foo{}{bar}"),
		"":                     0,
	}
	for k, want := range cases {
		if got := Slot(k); got != want {
			t.Errorf("Slot(%q) = %d, want %d", k, got, want)
		}
	}
	if Slot("foo{}{bar}") == Slot("bar") {
		t.Error(`"foo{}{bar}" must hash whole (empty first tag), not "bar"`)
	}
	if Slot("foo{{bar}}zap") != Slot("{bar") {
		t.Error(`"foo{{bar}}zap" must hash "{bar"`)
	}
	if Slot("foo{bar}{zap}") != Slot("bar") {
		t.Error(`"foo{bar}{zap}" must hash "bar"`)
	}
}

// FuzzKeySlot: whatever the bucket key (braces, colons, newlines, invalid
// UTF-8, long strings) and whatever a valid prefix, the store routes the
// prefixed key to the slot Redis computes for the full key, and a key with
// a hash tag lands in its tag's slot, so the prefix can never move it and
// bytes after the tag can never move it either.
func FuzzKeySlot(f *testing.F) {
	for _, s := range []string{"", "{", "}", "{}", "{a}", "a{b}c", "{a}{b}", "x\n{y}\xff", strings.Repeat("{", 300), "fg:{tenant=acme}:rule"} {
		f.Add("fg:", s, "suffix")
	}
	f.Add("", "{}", "{a}")
	f.Fuzz(func(t *testing.T, prefix, key, tail string) {
		if strings.ContainsAny(prefix, "{}") {
			prefix = strings.NewReplacer("{", "(", "}", ")").Replace(prefix)
		}
		s := &Store{prefix: prefix}
		full := prefix + key
		if got, want := s.slotOf(key), Slot(full); got != want {
			t.Fatalf("slotOf(%q) with prefix %q = %d, Slot(full) = %d", key, prefix, got, want)
		}
		tag := hashTag(key)
		if len(tag) != len(key) {
			// key has a tag: the prefix and anything appended are irrelevant.
			if got, want := s.slotOf(key+tail), int(crc16(tag)&16383); got != want {
				t.Fatalf("key %q with tag %q: slot %d, want the tag's %d", key+tail, tag, got, want)
			}
			if hashTag(full) != tag {
				t.Fatalf("prefix %q changed the tag of %q from %q to %q", prefix, key, tag, hashTag(full))
			}
		}
		if sl := Slot(full); sl < 0 || sl >= 16384 {
			t.Fatalf("slot %d out of range", sl)
		}
	})
}
