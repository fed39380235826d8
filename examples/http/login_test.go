package main

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/policyfile"
)

// TestHTTPExampleLoginAttack: the login form's user is what the login
// limits key on, so a guesser changing X-User on every try gets the
// policy's allowance for the account it guesses, and a credential stuffer
// the per-address allowance, both from the test's one address.
func TestHTTPExampleLoginAttack(t *testing.T) {
	f, err := policyfile.LoadFile("../policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := f.Limits
	allow := map[string]int{}
	for _, r := range p.Rules {
		allow[r.Name] = int(r.Rate.N)
	}
	api, _, _, out := start(t)
	out.WaitFor(t, reloaded, 1, 5*time.Second)
	const tries = 40
	attack := func(name string, user func(i int) string) int {
		t.Helper()
		reached := 0
		for i := range tries {
			q := url.Values{"user": {user(i)}, "password": {"guess"}}
			resp, _ := get(t, "POST", api+"/v1/login?"+q.Encode(), "X-User", fmt.Sprintf("decoy-%d", i))
			switch resp.StatusCode {
			case http.StatusUnauthorized:
				reached++
			case http.StatusTooManyRequests:
			default:
				t.Fatalf("%s, try %d: status %d", name, i+1, resp.StatusCode)
			}
		}
		return reached
	}
	if got, want := attack("brute force on alice", func(int) string { return "alice" }), allow["login-ip-user"]; got != want {
		t.Errorf("brute force on alice rotating X-User: %d of %d guesses reached the password check, want %d", got, tries, want)
	}
	// The same address has spent those guesses of its per-address allowance.
	if got, want := attack("credential stuffing", func(i int) string { return fmt.Sprintf("victim-%d", i) }), allow["login-ip"]-allow["login-ip-user"]; got != want {
		t.Errorf("credential stuffing rotating X-User: %d of %d guesses reached the password check, want %d", got, tries, want)
	}
}
