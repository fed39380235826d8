// Command client calls the example gRPC shop (examples/grpc) in a bounded
// loop faster than the policy allows, and shows the floodgate client
// interceptor honouring the server's pushback: a call denied with
// RESOURCE_EXHAUSTED and a grpc-retry-pushback-ms trailer is retried after at
// least that long, up to -attempts attempts, never past the call's deadline.
//
//	cd examples && go run ./grpc &
//	go run ./client -n 12
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/internal/shoppb"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "client example:", err)
		os.Exit(1)
	}
}

// run makes -n Search calls and reports each one's attempts and waits. It
// fails if any call fails.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	fs.SetOutput(stdout)
	addr := fs.String("addr", "127.0.0.1:9090", "address of the example gRPC service")
	n := fs.Int("n", 12, "number of calls to make (1..1000)")
	attempts := fs.Int("attempts", 4, "attempts per call, the first included (1 disables retries)")
	timeout := fs.Duration("timeout", 5*time.Second, "deadline of one call, retries included")
	user := fs.String("user", "alice", "user the calls are made as (x-user)")
	tenant := fs.String("tenant", "acme", "tenant of the user (x-tenant)")
	tier := fs.String("tier", "pro", "plan tier of the tenant (x-tier)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case *n < 1 || *n > 1000:
		return fmt.Errorf("-n %d is outside 1..1000", *n)
	case *timeout <= 0:
		return fmt.Errorf("-timeout %s must be positive", *timeout)
	}

	conn, err := grpc.NewClient(*addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(
			// Outer: retries a denied call after the server's delay (plus
			// up to 20% jitter), at most -attempts times.
			interceptor.UnaryClient(interceptor.WithMaxAttempts(*attempts)),
			// Inner: runs once per attempt; it only reports.
			reportAttempts(stdout),
		),
	)
	if err != nil {
		return err
	}
	defer conn.Close()
	shop := shoppb.NewShopClient(conn)
	// The example server trusts these keys as if an auth proxy had set them.
	ctx = metadata.AppendToOutgoingContext(ctx, "x-user", *user, "x-tenant", *tenant, "x-tier", *tier)

	var ok, retried, failed int
	var waited time.Duration
	start := time.Now()
	for i := 1; i <= *n; i++ {
		log := &callLog{}
		callCtx, cancel := context.WithTimeout(context.WithValue(ctx, callLogKey{}, log), *timeout)
		fmt.Fprintf(stdout, "call %2d:", i)
		_, err := shop.Search(callCtx, &shoppb.SearchRequest{Query: "lamp"})
		cancel()
		waited += log.waited
		if log.attempts > 1 {
			retried++
		}
		if err != nil {
			failed++
			fmt.Fprintf(stdout, " FAILED after %d attempt(s): %v\n", log.attempts, err)
			continue
		}
		ok++
		fmt.Fprintf(stdout, " ok after %d attempt(s)\n", log.attempts)
	}
	fmt.Fprintf(stdout, "%d calls in %s: %d ok, %d needed a retry, %d failed; %s spent waiting as the server asked\n",
		*n, time.Since(start).Round(time.Millisecond), ok, retried, failed, waited.Round(time.Millisecond))
	if failed > 0 {
		return fmt.Errorf("%d of %d calls failed", failed, *n)
	}
	return nil
}

// callLog records the attempts of one call.
type callLog struct {
	attempts int
	lastEnd  time.Time
	waited   time.Duration
}

type callLogKey struct{}

// reportAttempts is a client interceptor placed inside the retrying one, so it
// sees every attempt: it prints each denial with the delay the server asked
// for, and how long the client actually waited before the next attempt.
func reportAttempts(w io.Writer) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		log, _ := ctx.Value(callLogKey{}).(*callLog)
		if log == nil {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		if log.attempts > 0 {
			wait := time.Since(log.lastEnd)
			log.waited += wait
			fmt.Fprintf(w, " waited %s;", wait.Round(time.Millisecond))
		}
		log.attempts++
		var trailer metadata.MD
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Trailer(&trailer))...)
		log.lastEnd = time.Now()
		if err != nil {
			delay, ok := interceptor.RetryDelay(err, trailer)
			switch {
			case ok:
				fmt.Fprintf(w, " %s, server asks to wait %s;", status.Code(err), delay)
			case !errors.Is(err, context.DeadlineExceeded):
				fmt.Fprintf(w, " %s;", status.Code(err))
			}
		}
		return err
	}
}
