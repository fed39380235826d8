package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/policyfile"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// operatorPolicy refills one unit per 6 minutes at most, so the counts a
// test asserts cannot move while it runs.
const operatorPolicy = `rules:
  - name: login
    match: {method: /auth.v1.Auth/Login}
    key: [user]
    rate: 5/1h
    algorithm: sliding_window_log
  - name: per-user
    key: [user]
    rate: 10/1h
    burst: 10
`

func writePolicy(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(p, []byte(operatorPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// admitN admits n requests of alice for method through a Limiter over
// client, as a service would.
func admitN(t *testing.T, client redis.UniversalClient, policy, method string, n int) *tiers.Limiter {
	t.Helper()
	f, err := policyfile.LoadFile(policy)
	if err != nil {
		t.Fatal(err)
	}
	s, err := redisstore.New(client, redisstore.WithBatching(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	old := slog.Default() // no fallback here: the warning is noise
	slog.SetDefault(slog.New(slog.DiscardHandler))
	l, err := tiers.NewLimiter(s, f.Limits)
	slog.SetDefault(old)
	if err != nil {
		t.Fatal(err)
	}
	r := &floodgate.Request{Method: method, Identity: floodgate.Identity{User: "alice"}}
	for i := range n {
		if d, _, err := l.Admit(context.Background(), r); !d.Allowed || err != nil {
			t.Fatalf("request %d: %+v %v", i, d, err)
		}
	}
	return l
}

// row returns the line of out for rule, or "".
func row(out, rule string) string {
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, rule+" ") {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

func withStdin(t *testing.T, s string) {
	t.Helper()
	old := stdin
	stdin = strings.NewReader(s)
	t.Cleanup(func() { stdin = old })
}

// TestInspectURLForms: inspect reads exact remaining counts after known
// takes through each of the three REDIS_URL forms, and charges nothing.
func TestInspectURLForms(t *testing.T) {
	policy := writePolicy(t)
	srv := redistest.Start(t)
	forms := []struct {
		name, url string
		client    func() redis.UniversalClient
	}{{"standalone", "redis://" + srv.Addr(), func() redis.UniversalClient { return srv.Client() }}}
	if !testing.Short() {
		sen := redistest.StartSentinel(t)
		cl := redistest.StartCluster(t)
		addrs := cl.Addrs()
		forms = append(forms,
			struct {
				name, url string
				client    func() redis.UniversalClient
			}{"sentinel", "redis+sentinel://" + sen.Addrs()[0] + "?master_name=" + redistest.SentinelMaster, func() redis.UniversalClient { return sen.Client() }},
			struct {
				name, url string
				client    func() redis.UniversalClient
			}{"cluster", "redis+cluster://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2], func() redis.UniversalClient { return cl.Client() }},
		)
	}
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			t.Setenv("REDIS_URL", f.url)
			admitN(t, f.client(), policy, "/auth.v1.Auth/Login", 3)
			admitN(t, f.client(), policy, "/shop.v1.Shop/Buy", 1)
			for range 2 {
				code, out, errOut, p := runRecover(t, []string{"inspect", "-policy", policy, "-user", "alice", "-method", "/auth.v1.Auth/Login"})
				if p != nil || code != 0 {
					t.Fatalf("exit %d, panic %v, stderr %s", code, p, errOut)
				}
				if got := row(out, "login"); !strings.Contains(got, " fg:{user=alice}:login:sliding_window_log ") || !strings.Contains(got, " 2/5 ") {
					t.Fatalf("login row %q in\n%s", got, out)
				}
				if got := row(out, "per-user"); !strings.Contains(got, "fg:{user=alice}:per-user:token_bucket") || !strings.Contains(got, " 6/10 ") {
					t.Fatalf("per-user row %q in\n%s", got, out)
				}
			}
		})
	}
}

// TestResetAsksLogsAndRestores: reset shows the buckets, resets nothing
// when the answer is no, resets only the -rule named, and with -yes
// restores every bucket to full capacity (10 more requests admitted, the
// 11th denied), logging each.
func TestResetAsksLogsAndRestores(t *testing.T) {
	policy := writePolicy(t)
	srv := redistest.Start(t)
	t.Setenv("REDIS_URL", "redis://"+srv.Addr())
	admitN(t, srv.Client(), policy, "/auth.v1.Auth/Login", 3)
	args := []string{"reset", "-policy", policy, "-user", "alice", "-method", "/auth.v1.Auth/Login"}

	withStdin(t, "n\n")
	code, out, errOut, _ := runRecover(t, args)
	if code != 1 || !strings.Contains(out, "reset these 2 buckets to full? [y/N]") || !strings.Contains(errOut, "nothing reset") {
		t.Fatalf("answer n: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	code, out, _, _ = runRecover(t, []string{"inspect", "-policy", policy, "-user", "alice", "-method", "/auth.v1.Auth/Login"})
	if code != 0 || !strings.Contains(row(out, "per-user"), " 7/10 ") {
		t.Fatalf("after no: %s", out)
	}

	withStdin(t, "y\n")
	code, out, errOut, _ = runRecover(t, append(args, "-rule", "login"))
	if code != 0 || !strings.Contains(out, "reset this bucket to full? [y/N] reset 1 bucket") || !strings.Contains(errOut, `rule=login key="fg:{user=alice}:login:sliding_window_log" remaining_before=2 capacity=5`) {
		t.Fatalf("-rule login: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	code, out, _, _ = runRecover(t, []string{"inspect", "-policy", policy, "-user", "alice", "-method", "/auth.v1.Auth/Login"})
	if code != 0 || !strings.Contains(row(out, "login"), " 5/5 ") || !strings.Contains(row(out, "per-user"), " 7/10 ") {
		t.Fatalf("after -rule login: %s", out)
	}

	code, out, errOut, _ = runRecover(t, append(args, "-yes"))
	if code != 0 || strings.Contains(out, "[y/N]") || !strings.Contains(errOut, `rule=per-user key="fg:{user=alice}:per-user:token_bucket" remaining_before=7 capacity=10`) {
		t.Fatalf("-yes: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	l := admitN(t, srv.Client(), policy, "/shop.v1.Shop/Buy", 10)
	if d, _, _ := l.Admit(context.Background(), &floodgate.Request{Method: "/shop.v1.Shop/Buy", Identity: floodgate.Identity{User: "alice"}}); d.Allowed {
		t.Fatal("the 11th request after the reset was admitted: the reset gave more than full capacity")
	}
}

// TestOperatorRefusals: a caller no rule applies to, a -rule that does
// not apply, and bad flags are refused with a clear message.
func TestOperatorRefusals(t *testing.T) {
	policy := writePolicy(t)
	srv := redistest.Start(t)
	t.Setenv("REDIS_URL", "redis://"+srv.Addr())
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"inspect", "-policy", policy, "-tenant", "acme"}, 1, "no rule applies to tenant=acme (rule per-user matches but is keyed on an identity component it lacks); without a method, only rules that match every method apply"},
		{[]string{"inspect", "-policy", policy, "-ip", "10.0.0.1", "-method", "/x.Y/Z"}, 1, "no rule applies to method=/x.Y/Z ip=10.0.0.1"},
		{[]string{"reset", "-policy", policy, "-user", "alice", "-rule", "login", "-yes"}, 1, `no rule applies: "login" to this caller (the rules that apply: per-user)`},
		{[]string{"inspect", "-user", "alice"}, 2, "-policy is required"},
		{[]string{"inspect", "-policy", policy, "-user", "alice", "-ip", "nope"}, 2, `-ip "nope" is not an IP address`},
		{[]string{"inspect", "-policy", policy}, 2, "name the caller"},
		{[]string{"reset", "-policy", policy, "-user", "alice", "-redis", "http://x"}, 2, "-redis"},
	} {
		code, _, errOut, p := runRecover(t, c.args)
		if p != nil || code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d (want %d), panic %v, stderr %q; want it to contain %q", c.args, code, c.code, p, errOut, c.want)
		}
	}
	t.Setenv("REDIS_URL", "")
	if code, _, errOut, _ := runRecover(t, []string{"inspect", "-policy", policy, "-user", "a"}); code != 2 || !strings.Contains(errOut, "REDIS_URL is required") {
		t.Errorf("no Redis: exit %d, %q", code, errOut)
	}
}
