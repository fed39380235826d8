package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-go/floodgate/testing/redistest"
)

// The program end to end with the build-free floodgate contender: every
// call answered OK, none failed, both descriptor counts measured (each
// phase ending at its budget of 2 000 calls), and Redis did the deciding
// (script calls, one bucket write per descriptor at most).
func TestShortInProcess(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	code := run([]string{"rls", "-short", "-only", "floodgate", "-inprocess", "-c", "8", "-keys", "500", "-max-ops", "2000"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	o := out.String()
	for _, want := range []string{"command: (in bench/rls) go run . -short -only floodgate -inprocess -c 8 -keys 500 -max-ops 2000", "1 descriptor(s) per call", "4 descriptor(s) per call", "redis:   redis-server"} {
		if !strings.Contains(o, want) {
			t.Errorf("output lacks %q:\n%s", want, o)
		}
	}
	row := regexp.MustCompile(`(?m)^\s+floodgate-inprocess\s+(\d+)\s+\d+\s+[\d.]+\s+[\d.]+\s+n/a\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+-\s+-$`)
	rows := row.FindAllStringSubmatch(o, -1)
	if len(rows) != 2 {
		t.Fatalf("want 2 rows:\n%s", o)
	}
	for i, r := range rows {
		calls, _ := strconv.Atoi(r[1])
		cmds, _ := strconv.ParseFloat(r[2], 64)
		if calls <= 0 || r[3] != "100.0" || r[4] != "0" {
			t.Errorf("row %d: %v: want calls, 100.0%% OK, 0 errors", i, r)
		}
		if cmds <= 0 {
			t.Errorf("row %d: %.2f redis commands per call", i, cmds)
		}
	}
	// One script call per call at most (batching shares them), and at
	// most one bucket write per descriptor.
	per := regexp.MustCompile(`floodgate-inprocess: redis commands per call: (.*)`).FindAllStringSubmatch(o, -1)
	if len(per) != 2 {
		t.Fatalf("no command breakdown:\n%s", o)
	}
	for i, p := range per {
		got := map[string]float64{}
		for _, part := range strings.Split(p[1], ", ") {
			name, v, _ := strings.Cut(part, " ")
			got[name], _ = strconv.ParseFloat(v, 64)
		}
		n := []float64{1, 4}[i]
		if got["EVALSHA"] <= 0 || got["EVALSHA"] > 1 || got["SET"] <= 0 || got["SET"] > n {
			t.Errorf("%d descriptor(s): commands per call %v: want 0 < EVALSHA <= 1, 0 < SET <= %v", int(n), got, n)
		}
	}
}

func TestBadFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-descriptors", "3"}, `-descriptors: "3" is not 1 or 4`},
		{[]string{"-only", "nope"}, `-only: unknown contender "nope"`},
		{[]string{"-c", "0"}, "-c 0 is out of range"},
		{[]string{"-duration", "0s"}, "-duration must be in (0, 1m]"},
	} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"rls"}, c.args...), &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}

// The load generator reads overall_code from the wire form, wherever the
// encoder put it and whatever follows.
func TestRawCodec(t *testing.T) {
	t.Parallel()
	for _, code := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_UNKNOWN} {
		b, err := proto.Marshal(&rlsv3.RateLimitResponse{OverallCode: code, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: 2, LimitRemaining: 7}},
			RawBody: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		for _, split := range []int{0, 1, len(b) / 2} {
			var data mem.BufferSlice
			if split == 0 {
				data = mem.BufferSlice{mem.SliceBuffer(b)}
			} else {
				data = mem.BufferSlice{mem.SliceBuffer(b[:split]), mem.SliceBuffer(b[split:])}
			}
			var r rawResponse
			if err := (rawCodec{}).Unmarshal(data, &r); err != nil || r.code != code {
				t.Errorf("code %v split %d: got %v, %v", code, split, r.code, err)
			}
		}
	}
	if _, err := (rawCodec{}).Marshal("nope"); err == nil {
		t.Error("Marshal accepted a string")
	}
}

// The in-process contender adds its response headers only with -headers,
// so that by default it answers as envoyproxy/ratelimit does by default.
func TestInProcessHeaders(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	reqs, err := requests(10, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, on := range []bool{false, true} {
		c, err := startInProcess(srv.Addr(), on)
		if err != nil {
			t.Fatal(err)
		}
		cc, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			c.stop()
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, reqs[0])
		cancel()
		_ = cc.Close()
		c.stop()
		if err != nil {
			t.Fatalf("headers %v: %v", on, err)
		}
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(resp.GetStatuses()) != 4 {
			t.Fatalf("headers %v: %v", on, resp)
		}
		if got := len(resp.GetResponseHeadersToAdd()) > 0; got != on {
			t.Errorf("headers %v: response headers %v", on, resp.GetResponseHeadersToAdd())
		}
	}
}
