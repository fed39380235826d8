package interceptor

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/shoppb"
	"github.com/floodgate-go/floodgate/policyfile"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// newTestMemstore is an in-process store on a fake clock that never moves:
// counts are exact whatever the machine's speed.
func newTestMemstore(t testing.TB) quota.Store {
	t.Helper()
	s, err := memstore.New(memstore.WithClock(clock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// examplePolicy loads the examples' policy, whose login rules the attacks
// below run against, and returns the allowance (rate N) of each rule.
func examplePolicy(t *testing.T) (*tiers.Policy, map[string]int) {
	t.Helper()
	f, err := policyfile.LoadFile("../examples/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := f.Limits
	n := map[string]int{}
	for _, r := range p.Rules {
		n[r.Name] = int(r.Rate.N)
	}
	for _, name := range []string{"grpc-login-ip-user", "grpc-login-user", "grpc-login-ip", "login-ip-user", "login-user", "login-ip"} {
		if n[name] == 0 {
			t.Fatalf("examples/policy.yaml has no rule %q with a rate", name)
		}
	}
	return p, n
}

// addrIn returns the i-th address of the /64 of base.
func addrIn(base string, i int) string {
	a := netip.MustParseAddr(base).As16()
	binary.BigEndian.PutUint64(a[8:], uint64(i)*0x9e3779b97f4a7c15+1)
	return netip.AddrFrom16(a).String()
}

// The attacker sits behind the service's own (trusted) proxy, which
// forwards each attempt's source address; it owns a /64 and rotates
// addresses inside it, and sends a different user header every time.
const attempts = 60

type attempt struct {
	user, header, addr string
}

// bruteForce: one account, every attempt from another address of one /64
// with another user header.
func bruteForce(target, net64 string) []attempt {
	out := make([]attempt, attempts)
	for i := range out {
		out[i] = attempt{user: target, header: fmt.Sprintf("decoy-%d", i), addr: addrIn(net64, i)}
	}
	return out
}

// stuffing: one /64, a different account (and header) every attempt.
func stuffing(net64 string) []attempt {
	out := make([]attempt, attempts)
	for i := range out {
		out[i] = attempt{user: fmt.Sprintf("victim-%d", i), header: fmt.Sprintf("decoy-%d", i), addr: addrIn(net64, i)}
	}
	return out
}

// distributed: one account, every attempt from another /64.
func distributed(target string) []attempt {
	out := make([]attempt, attempts)
	for i := range out {
		out[i] = attempt{user: target, header: "decoy", addr: addrIn(fmt.Sprintf("2001:db8:%x::", 0x100+i), 1)}
	}
	return out
}

// TestLoginAttackGRPC runs the attacks against the shop's Login over a
// real gRPC server wired as examples/grpc is: the login limiter keys on
// LoginRequest.user (the annotated field) and only other calls on the
// x-user header. Each attack gets at most the policy's allowance.
func TestLoginAttackGRPC(t *testing.T) {
	t.Parallel()
	p, allow := examplePolicy(t)
	l, err := tiers.NewLimiter(newTestMemstore(t), p)
	if err != nil {
		t.Fatal(err)
	}
	fg := MustNew(
		WithTrustedProxies("127.0.0.1"),
		WithUser(FirstOf(FromProtoField(idUser), FromHeader("x-user"))),
		WithTenant(FromHeader("x-tenant")),
	)
	shop := serveShop(t, "tcp4", grpc.ChainUnaryInterceptor(fg.UnaryServer(l)))
	run := func(name string, as []attempt, want int) {
		t.Helper()
		reached := 0
		for _, a := range as {
			ctx := metadata.AppendToOutgoingContext(t.Context(), "x-user", a.header, "x-forwarded-for", a.addr)
			_, err := shop.Login(ctx, &shoppb.LoginRequest{User: a.user, Password: "guess"})
			switch status.Code(err) {
			case codes.Unauthenticated: // the guess reached the password check
				reached++
			case codes.ResourceExhausted:
			default:
				t.Fatalf("%s: %v", name, err)
			}
		}
		if reached != want {
			t.Errorf("%s: %d of %d guesses reached the password check, want the policy's %d", name, reached, attempts, want)
		}
	}
	run("brute force on alice from 2001:db8:a::/64", bruteForce("alice", "2001:db8:a::"), allow["grpc-login-ip-user"])
	run("credential stuffing from 2001:db8:b::/64", stuffing("2001:db8:b::"), allow["grpc-login-ip"])
	run("brute force on bob from 60 /64s", distributed("bob"), allow["grpc-login-user"])
}

// TestLoginAttackHTTP is TestLoginAttackGRPC over a real HTTP server wired
// as examples/http is: the login form's user field, never X-User.
func TestLoginAttackHTTP(t *testing.T) {
	t.Parallel()
	p, allow := examplePolicy(t)
	l, err := tiers.NewLimiter(newTestMemstore(t), p)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/login", func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("user") == "" || r.FormValue("password") != "hunter2" {
			http.Error(w, "wrong user or password", http.StatusUnauthorized)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	loginUser := func(r *http.Request) string {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/login" {
			return r.FormValue("user")
		}
		return ""
	}
	fg := MustNew(
		WithServeMux(mux),
		WithTrustedProxies("127.0.0.1"),
		WithUser(FirstOf(FromHTTPRequest(loginUser), FromHeader("X-User"))),
		WithTenant(FromHeader("X-Tenant")),
	)
	srv := httptest.NewServer(fg.HTTP(floodgate.Chain{l})(mux))
	t.Cleanup(srv.Close)
	run := func(name string, as []attempt, want int) {
		t.Helper()
		reached := 0
		for _, a := range as {
			req, err := http.NewRequest("POST", srv.URL+"/v1/login", strings.NewReader(url.Values{"user": {a.user}, "password": {"guess"}}.Encode()))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("X-User", a.header)
			req.Header.Set("X-Forwarded-For", a.addr)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusUnauthorized:
				reached++
			case http.StatusTooManyRequests:
			default:
				t.Fatalf("%s: status %d", name, resp.StatusCode)
			}
		}
		if reached != want {
			t.Errorf("%s: %d of %d guesses reached the password check, want the policy's %d", name, reached, attempts, want)
		}
	}
	run("brute force on alice from 2001:db8:a::/64", bruteForce("alice", "2001:db8:a::"), allow["login-ip-user"])
	run("credential stuffing from 2001:db8:b::/64", stuffing("2001:db8:b::"), allow["login-ip"])
	run("brute force on bob from 60 /64s", distributed("bob"), allow["login-user"])
}

// TestSpoofedForwardingLandsInPeerPrefix: a forwarding header from a peer
// that is not a trusted proxy is ignored, so the request is keyed on the
// peer's own prefix whatever it claims, over gRPC (from ::1) and HTTP.
func TestSpoofedForwardingLandsInPeerPrefix(t *testing.T) {
	t.Parallel()
	l, err := tiers.NewLimiter(newTestMemstore(t), &tiers.Policy{Rules: []tiers.Rule{
		{Name: "per-ip", Key: []tiers.Scope{tiers.ScopeIP}, Rate: tiers.Rate{N: 3, Period: time.Minute}, Algorithm: quota.SlidingWindowLog},
	}})
	if err != nil {
		t.Fatal(err)
	}
	st := &stage{}
	fg := MustNew(WithTrustedProxies("10.0.0.0/8", "2001:db8:ffff::/48"))

	// gRPC from [::1], claiming 60 other addresses.
	shop := serveShop(t, "tcp6", grpc.ChainUnaryInterceptor(fg.UnaryServer(floodgate.Chain{st, l})))
	allowed := 0
	for i := range 60 {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-forwarded-for", addrIn("2001:db8:c::", i), "forwarded", "for=192.0.2.1", "x-real-ip", "192.0.2.2")
		_, err := shop.Login(ctx, &shoppb.LoginRequest{User: "u", Password: "hunter2"})
		switch status.Code(err) {
		case codes.OK:
			allowed++
		case codes.ResourceExhausted:
		default:
			t.Fatal(err)
		}
	}
	if allowed != 3 {
		t.Errorf("gRPC from ::1 with spoofed headers: %d of 60 allowed, want 3", allowed)
	}
	st.mu.Lock()
	first := st.seen[0]
	st.mu.Unlock()
	if first.Identity.IP != netip.MustParseAddr("::1") {
		t.Errorf("client IP = %v, want the peer ::1", first.Identity.IP)
	}
	if k := l.Buckets(nil, first); len(k) != 1 || k[0].Key != "fg:{ip=%3A%3A%2F64}:per-ip:sliding_window_log" {
		t.Errorf("buckets %+v, want the peer's ::/64", k)
	}

	// HTTP from an untrusted IPv6 peer (in process), and a trusted one.
	mw := fg.HTTP(floodgate.Chain{st, l})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	serve := func(peer, xff string) int {
		req := httptest.NewRequest("GET", "/x", nil)
		req.Pattern = "GET /x"
		req.RemoteAddr = net.JoinHostPort(peer, "4711")
		req.Header.Set("X-Forwarded-For", xff)
		rec := httptest.NewRecorder()
		mw.ServeHTTP(rec, req)
		return rec.Code
	}
	allowed = 0
	for i := range 60 {
		if serve(addrIn("2001:db8:d::", i), addrIn("2001:db8:e::", i)) == http.StatusOK {
			allowed++
		}
	}
	if allowed != 3 {
		t.Errorf("HTTP from one untrusted /64 with spoofed X-Forwarded-For: %d of 60 allowed, want 3", allowed)
	}
	st.mu.Lock()
	lastSeen := st.seen[len(st.seen)-1]
	st.mu.Unlock()
	if k := l.Buckets(nil, lastSeen); len(k) != 1 || k[0].Key != "fg:{ip=2001%3Adb8%3Ad%3A%3A%2F64}:per-ip:sliding_window_log" {
		t.Errorf("buckets %+v, want the peer's 2001:db8:d::/64", k)
	}
	// Through a trusted proxy the forwarded client counts, by its /64.
	allowed = 0
	for i := range 10 {
		if serve("2001:db8:ffff::1", addrIn("2001:db8:f::", i)) == http.StatusOK {
			allowed++
		}
	}
	if allowed != 3 {
		t.Errorf("a forwarded /64 rotating addresses: %d of 10 allowed, want 3", allowed)
	}
}

// FuzzMessageIdentityKey: whatever a client puts in the marked user field
// of its login request (or the login form), the bucket key holds it
// escaped or hashed in its own place: two different values never share a
// key, and no value chooses the hash tag or another principal's key.
func FuzzMessageIdentityKey(f *testing.F) {
	f.Add("alice", "bob")
	f.Add("a}:b", "a")
	f.Add("{ip=127.0.0.1}", "%7Bip%3D127.0.0.1%7D")
	f.Add("x:user=y", "x")
	f.Add(strings.Repeat("z", 65), "#"+strings.Repeat("0", 32))
	f.Add("\xff\x00", "\n")
	l, err := tiers.NewLimiter(newTestMemstore(f), mustPolicy(f, `
rules:
  - {name: login-user, match: {method: /floodgate.shop.v1.Shop/Login}, key: [user], rate: 5/1m}
  - {name: login-ip-user, match: {method: /floodgate.shop.v1.Shop/Login}, key: [ip, user], rate: 5/1m}
  - {name: form-user, match: {method: "POST /v1/login"}, key: [user, ip], rate: 5/1m}
`))
	if err != nil {
		f.Fatal(err)
	}
	fg := MustNew(WithUser(FirstOf(
		FromProtoField(idUser),
		FromHTTPRequest(func(r *http.Request) string { return r.PostFormValue("user") }),
	)))
	var got *floodgate.Request
	capture := floodgate.AdmitFunc(func(_ context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
		c := *r
		got = &c
		return floodgate.Decision{Allowed: true}, nil, nil
	})
	unary := fg.UnaryServer(capture)
	mw := fg.HTTP(capture)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	info := &grpc.UnaryServerInfo{FullMethod: "/floodgate.shop.v1.Shop/Login"}
	ok := func(context.Context, any) (any, error) { return nil, nil }
	grpcKeys := func(user string) []string {
		got = nil
		if _, err := unary(context.Background(), &shoppb.LoginRequest{User: user}, info, ok); err != nil || got == nil {
			f.Fatalf("unary: %v", err)
		}
		got.Identity.IP = netip.MustParseAddr("192.0.2.1")
		var ks []string
		for _, b := range l.Buckets(nil, got) {
			ks = append(ks, b.Key)
		}
		return ks
	}
	httpKeys := func(user string) []string {
		got = nil
		req := httptest.NewRequest("POST", "/v1/login", strings.NewReader(url.Values{"user": {user}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Pattern = "POST /v1/login"
		req.RemoteAddr = "192.0.2.1:1"
		mw.ServeHTTP(httptest.NewRecorder(), req)
		if got == nil {
			f.Fatal("HTTP: no request admitted")
		}
		var ks []string
		for _, b := range l.Buckets(nil, got) {
			ks = append(ks, b.Key)
		}
		return ks
	}
	f.Fuzz(func(t *testing.T, u1, u2 string) {
		for _, keysOf := range []func(string) []string{grpcKeys, httpKeys} {
			k1, k2 := keysOf(u1), keysOf(u2)
			if u1 == "" {
				if len(k1) != 0 {
					t.Fatalf("empty user: keys %q", k1)
				}
				continue
			}
			for _, k := range k1 {
				if !strings.Contains(k, "user="+escapeRef(u1)) {
					t.Fatalf("user %q: key %q lacks user=%s", u1, k, escapeRef(u1))
				}
				if strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 || !strings.HasPrefix(k, "fg:{") {
					t.Fatalf("user %q: key %q has a hash tag not ours", u1, k)
				}
			}
			if u2 == "" {
				continue
			}
			for i := range min(len(k1), len(k2)) {
				if (k1[i] == k2[i]) != (u1 == u2) {
					t.Fatalf("users %q and %q: keys %q and %q", u1, u2, k1[i], k2[i])
				}
			}
		}
	})
}

func mustPolicy(t testing.TB, y string) *tiers.Policy {
	t.Helper()
	p, err := tiers.Load([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// escapeRef is an independent reference for a key value: every byte
// outside [A-Za-z0-9._-] as %XX, or '#' and a hash past 64 bytes.
func escapeRef(s string) string {
	if len(s) > 64 {
		return "#"
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
