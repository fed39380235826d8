package interceptor

import (
	"net/netip"
	"strings"
	"testing"
)

var fuzzTrusted = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}

func TestResolveXFF(t *testing.T) {
	t.Parallel()
	peer := netip.MustParseAddr("10.0.0.1")
	for _, tc := range []struct {
		values []string
		want   string
	}{
		{nil, "10.0.0.1"},
		{[]string{""}, "10.0.0.1"},
		{[]string{"1.2.3.4"}, "1.2.3.4"},
		{[]string{"1.2.3.4:5678"}, "1.2.3.4"},
		{[]string{"[2001:db8::5]:80, 3.3.3.3"}, "3.3.3.3"},
		{[]string{"7.7.7.7, [2001:db8::5]:80"}, "7.7.7.7"},
		{[]string{"::ffff:1.2.3.4"}, "1.2.3.4"},
		{[]string{"fe80::1%eth0"}, "fe80::1"},
		{[]string{"1.1.1.1,,10.0.0.3"}, "1.1.1.1"},
		{[]string{"unknown, 10.0.0.3"}, "10.0.0.3"},
		{[]string{"1.1.1.1, 10.0.0.2", "10.0.0.3"}, "1.1.1.1"},
	} {
		if got := resolveXFF(fuzzTrusted, peer, tc.values); got != netip.MustParseAddr(tc.want) {
			t.Errorf("resolveXFF(%q) = %v, want %s", tc.values, got, tc.want)
		}
	}
}

func TestForwardedFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		elem string
		want string
		ok   bool
	}{
		{"for=1.2.3.4", "1.2.3.4", true},
		{"For=1.2.3.4;proto=http", "1.2.3.4", true},
		{`proto=https; for="[2001:db8::1]:8080"`, "[2001:db8::1]:8080", true},
		{`for="\1.2.3.4"`, "1.2.3.4", true},
		{`for=unknown`, "unknown", true},
		{`by=1.2.3.4`, "", false},
		{`for=1.1.1.1;for=2.2.2.2`, "", false},
		{`for="1.2.3.4`, "", false},
		{`for="1.2.3.4"x`, "", false},
		{`for`, "", false},
		{`for=`, "", false},
	} {
		got, ok := forwardedFor(tc.elem)
		if got != tc.want || ok != tc.ok {
			t.Errorf("forwardedFor(%q) = %q, %v; want %q, %v", tc.elem, got, ok, tc.want, tc.ok)
		}
	}
	if got := splitForwarded(`for="a,b";x=1, for=c,,`); len(got) != 2 || got[0] != `for="a,b";x=1` || got[1] != "for=c" {
		t.Errorf("splitForwarded = %q", got)
	}
	peer := netip.MustParseAddr("10.0.0.1")
	for _, tc := range []struct {
		v    string
		want string
	}{
		{`for=1.2.3.4, for=10.0.0.7`, "1.2.3.4"},
		{`for=_hidden, for=10.0.0.7`, "10.0.0.7"},
		{`for=unknown`, "10.0.0.1"},
		{`for="[2001:db8::1]", for="[::1]:1"`, "::1"},
	} {
		if got := resolveForwarded(fuzzTrusted, peer, []string{tc.v}); got != netip.MustParseAddr(tc.want) {
			t.Errorf("resolveForwarded(%q) = %v, want %s", tc.v, got, tc.want)
		}
	}
}

// checkWalk asserts the invariant of both parsers: the result is the peer
// or a hop all of whose right-hand hops are trusted proxies, and it is the
// rightmost untrusted hop when there is one before any unparsable hop.
func checkWalk(t *testing.T, peer, got netip.Addr, hops []netip.Addr) {
	t.Helper()
	// hops are parsed right to left order reversed back: hops[len-1] is nearest.
	want := peer
	for i := len(hops) - 1; i >= 0; i-- {
		if !hops[i].IsValid() {
			break
		}
		want = hops[i]
		if !isTrusted(fuzzTrusted, hops[i]) {
			break
		}
	}
	if got != want {
		t.Fatalf("got %v, want %v (hops %v)", got, want, hops)
	}
}

func FuzzXFF(f *testing.F) {
	for _, s := range []string{"", "1.2.3.4", "1.2.3.4, 10.0.0.1", "garbage, 10.0.0.2", "[::1]:80,10.1.1.1", ",,,", "2001:db8::1, 7.7.7.7:1"} {
		f.Add(s, "10.0.0.1")
		f.Add(s, "192.0.2.1")
	}
	f.Fuzz(func(t *testing.T, xff, peerS string) {
		peer, err := netip.ParseAddr(peerS)
		if err != nil {
			return
		}
		peer = normalize(peer)
		got := resolveXFF(fuzzTrusted, peer, []string{xff})
		var hops []netip.Addr
		for _, h := range strings.Split(xff, ",") {
			if h = strings.TrimSpace(h); h != "" {
				hops = append(hops, parseHostAddr(h))
			}
		}
		checkWalk(t, peer, got, hops)
		// Through the config: an untrusted peer is never replaced.
		c := &config{trusted: fuzzTrusted}
		md := Metadata{h: map[string][]string{"X-Forwarded-For": {xff}}}
		if r := c.clientIP(peer, md); !isTrusted(fuzzTrusted, peer) && r != peer {
			t.Fatalf("untrusted peer %v resolved to %v", peer, r)
		}
	})
}

func FuzzForwarded(f *testing.F) {
	for _, s := range []string{"", "for=1.2.3.4", `for="[2001:db8::1]:80";proto=https, for=10.0.0.3`, `for="\"`, `for=_x;by=y`, `for="a,b", for=10.0.0.9`, `;;==,"`} {
		f.Add(s, "10.0.0.1")
		f.Add(s, "192.0.2.1")
	}
	f.Fuzz(func(t *testing.T, fwd, peerS string) {
		peer, err := netip.ParseAddr(peerS)
		if err != nil {
			return
		}
		peer = normalize(peer)
		got := resolveForwarded(fuzzTrusted, peer, []string{fwd})
		var hops []netip.Addr
		for _, e := range splitForwarded(fwd) {
			node, ok := forwardedFor(e)
			var a netip.Addr
			if ok {
				a = parseHostAddr(node)
			}
			hops = append(hops, a)
		}
		checkWalk(t, peer, got, hops)
		c := &config{trusted: fuzzTrusted, ipHeader: Forwarded}
		md := Metadata{h: map[string][]string{"Forwarded": {fwd}}}
		if r := c.clientIP(peer, md); !isTrusted(fuzzTrusted, peer) && r != peer {
			t.Fatalf("untrusted peer %v resolved to %v", peer, r)
		}
	})
}
