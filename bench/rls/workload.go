package main

import (
	"fmt"
	"strconv"

	extrlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// MaxKeys is the most principals: the addresses of 198.18.0.0/15.
const MaxKeys = 1 << 17

// Domain is the rate-limit domain of the benchmark.
const Domain = "bench"

// envoyConfig is the envoyproxy/ratelimit configuration both contenders
// serve: the floodgate contender serves its translation (package
// rls/translate, with tenant and user mapped to those scopes). Four
// levels, as the peers and grpcload benchmarks have: the client address,
// the tenant, the user, and the user at one route. The limits are far
// above the load, so every call is allowed and the table measures the
// decision path.
const envoyConfig = `domain: bench
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 10000000}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 10000000}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10000000}
  - key: generic_key
    value: search
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 10000000}
`

// translateAs maps the descriptor keys to floodgate scopes for the
// translation (remote_address is ip by default).
var translateAs = map[string]string{"tenant": "tenant", "user": "user"}

// requests builds, for every principal, the call Envoy would send with n
// descriptors (1 or 4): principal k is at address 198.18.0.0 + k (the
// benchmarking range of RFC 2544: only a descriptor value, never dialled),
// in tenant k/100, user k. Calls are built once and only read by the
// workers.
func requests(keys, n int) ([]*rlsv3.RateLimitRequest, error) {
	if keys > MaxKeys {
		return nil, fmt.Errorf("%d principals; at most %d", keys, MaxKeys)
	}
	if n != 1 && n != 4 {
		return nil, fmt.Errorf("descriptors per call must be 1 or 4, not %d", n)
	}
	out := make([]*rlsv3.RateLimitRequest, keys)
	for k := range keys {
		ip := fmt.Sprintf("198.%d.%d.%d", 18+k>>16&1, k>>8&255, k&255)
		user := "u" + strconv.Itoa(k)
		descs := []*extrlsv3.RateLimitDescriptor{desc("remote_address", ip)}
		if n == 4 {
			descs = append(descs,
				desc("tenant", "t"+strconv.Itoa(k/100)),
				desc("user", user),
				desc("generic_key", "search", "user", user))
		}
		out[k] = &rlsv3.RateLimitRequest{Domain: Domain, Descriptors: descs}
	}
	return out, nil
}

func desc(kv ...string) *extrlsv3.RateLimitDescriptor {
	d := &extrlsv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &extrlsv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}
