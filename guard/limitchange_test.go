package guard

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/testing/redistest"
)

// TestRaisedRuleGivesRoomAtOnce is the operator's probe of issue 42 over
// HTTP, in process and on Redis: a user spends a rule of 10/1h burst 10;
// the policy file is edited to 20/1h burst 20 and, once it reloads, the
// user gets exactly 10 more (what they consumed, 10, stays consumed; the
// raise is room at once), then 429; edited to 5/1h burst 5, the user gets
// none.
func TestRaisedRuleGivesRoomAtOnce(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"in process", "redis"} {
		t.Run(strings.ReplaceAll(store, " ", "_"), func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "policy.yaml")
			write := func(rate string, burst int) {
				t.Helper()
				s := "rules:\n  - {name: probe-hour, key: [user], rate: " + rate + ", burst: " + strconv.Itoa(burst) + "}\nidentity:\n  user: header:x-user\n"
				if err := os.WriteFile(path+".tmp", []byte(s), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(path+".tmp", path); err != nil {
					t.Fatal(err)
				}
			}
			write("10/1h", 10)
			opts := []Option{WithLogger(quiet), WithPolicyFile(path), WithPolicyInterval(10 * time.Millisecond)}
			if store == "redis" {
				opts = append(opts, WithRedisURL("redis://"+redistest.Start(t).Addr()), WithService("probe"))
			} else {
				opts = append(opts, WithInProcess())
			}
			g, err := New(context.Background(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close(context.Background())
			srv := httptest.NewServer(g.HTTP(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})))
			defer srv.Close()
			get := func() *http.Response {
				t.Helper()
				req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
				req.Header.Set("X-User", "u1")
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				return res
			}
			count := func(n int) (ok int, last *http.Response) {
				for range n {
					if last = get(); last.StatusCode == http.StatusOK {
						ok++
					}
				}
				return ok, last
			}
			if ok, _ := count(11); ok != 10 {
				t.Fatalf("before the raise: %d of 11 admitted, want 10", ok)
			}
			write("20/1h", 20)
			waitFor(t, "the raised rule", func() bool { return g.Limiter().Policy().Rules[0].Rate.N == 20 })
			res := get()
			// r, not t: t (the seconds until full) counts the real time
			// the reload took.
			if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("RateLimit"), `"probe-hour";r=9;`) || res.Header.Get("RateLimit-Policy") != `"probe-hour";q=20;w=3600` {
				t.Fatalf("first request after the raise: %d, RateLimit %q, RateLimit-Policy %q; want 200, r=9 (10 used of 20, and this one), q=20",
					res.StatusCode, res.Header.Get("RateLimit"), res.Header.Get("RateLimit-Policy"))
			}
			if ok, last := count(10); ok != 9 || last.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("after the raise: %d more of 10 admitted (last %d), want 9 and a 429", ok, last.StatusCode)
			}
			write("5/1h", 5)
			waitFor(t, "the cut rule", func() bool { return g.Limiter().Policy().Rules[0].Rate.N == 5 })
			if ok, _ := count(3); ok != 0 {
				t.Fatalf("after the cut: %d of 3 admitted, want none (20 used of 5)", ok)
			}
		})
	}
}
