package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/examples/internal/exampletest"
	"github.com/floodgate-go/floodgate/internal/shoppb"
	"github.com/floodgate-go/floodgate/policyfile"
)

// loginAllowance returns the rate (N) of each login rule of the policy.
func loginAllowance(t *testing.T) map[string]int {
	t.Helper()
	f, err := policyfile.LoadFile("../policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := f.Limits
	n := map[string]int{}
	for _, r := range p.Rules {
		n[r.Name] = int(r.Rate.N)
	}
	return n
}

// inNet returns the i-th address of the /64 of base.
func inNet(base string, i int) string {
	a := netip.MustParseAddr(base).As16()
	binary.BigEndian.PutUint64(a[8:], uint64(i)*0x9e3779b97f4a7c15+1)
	return netip.AddrFrom16(a).String()
}

// TestGRPCExampleLoginAttack attacks the example's Login from IPv6 clients
// behind its trusted proxy (the test, on 127.0.0.1), each attempt with a
// new x-user header and a new address: the login limits key on the
// account LoginRequest.user names and on the client's /64, so no rotation
// buys more than the policy's allowance.
func TestGRPCExampleLoginAttack(t *testing.T) {
	allow := loginAllowance(t)
	out := exampletest.Start(t, run, "-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0",
		"-policy", "../policy.yaml", "-work", "1ms", "-redis", "", "-trusted-proxies", "127.0.0.1/32")
	addr := out.WaitFor(t, listening, 1, 10*time.Second)[1]
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	shop := shoppb.NewShopClient(dial(t, addr))
	const tries = 40
	attack := func(name string, user, from func(i int) string, want int) {
		t.Helper()
		reached := 0
		for i := range tries {
			md := metadata.AppendToOutgoingContext(ctx, "x-user", fmt.Sprintf("decoy-%d", i), "x-forwarded-for", from(i))
			_, err := shop.Login(md, &shoppb.LoginRequest{User: user(i), Password: "guess"})
			switch status.Code(err) {
			case codes.Unauthenticated:
				reached++
			case codes.ResourceExhausted:
			default:
				t.Fatalf("%s, try %d: %v", name, i+1, err)
			}
		}
		if reached != want {
			t.Errorf("%s: %d of %d guesses reached the password check, want %d", name, reached, tries, want)
		}
	}
	one := func(u string) func(int) string { return func(int) string { return u } }
	rotating := func(base string) func(int) string { return func(i int) string { return inNet(base, i) } }
	attack("brute force on alice from one /64", one("alice"), rotating("2001:db8:a::"), allow["grpc-login-ip-user"])
	attack("credential stuffing from one /64", func(i int) string { return fmt.Sprintf("victim-%d", i) }, rotating("2001:db8:b::"), allow["grpc-login-ip"])
	attack("brute force on bob from 40 /64s", one("bob"), func(i int) string { return inNet(fmt.Sprintf("2001:db8:%x::", 0x100+i), 0) }, allow["grpc-login-user"])
	// Distinct clients trying distinct accounts are not each other's
	// problem: the forwarded addresses, not the proxy's, are the clients.
	attack("40 users from 40 /64s", func(i int) string { return fmt.Sprintf("user-%d", i) }, func(i int) string { return inNet(fmt.Sprintf("2001:db8:%x::", 0x200+i), 0) }, tries)
}
