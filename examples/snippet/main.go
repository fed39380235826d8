// Command snippet is the chain shown in examples/README.md (and in
// docs/chain.md), compiled and tested so they never drift apart: both pages
// hold the text between the snippet markers below, verbatim.
//
//	cd examples && go run ./snippet
package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"

	"google.golang.org/grpc"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/policyfile"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

func main() {
	mux := http.NewServeMux()
	if _, _, err := newServers("policy.yaml", mux); err != nil {
		fmt.Fprintln(os.Stderr, "snippet:", err)
		os.Exit(1)
	}
	fmt.Println("chain built: shedder, concurrency, tiers")
}

// snippet:start
func newServers(policyFile string, mux *http.ServeMux) (*grpc.Server, http.Handler, error) {
	file, err := policyfile.LoadFile(policyFile) // every error names its line
	if err != nil {
		return nil, nil, err
	}
	store, err := memstore.New() // one instance; for a fleet, package guard
	limits, err1 := tiers.NewLimiter(store, file.Limits)
	shed, err2 := shedder.New(64) // capacity: requests in flight
	conc, err3 := concurrency.New(concurrency.WithGlobal(128))
	fg, err4 := interceptor.New(interceptor.WithServeMux(mux)) // one config for every stage
	if err := errors.Join(err, err1, err2, err3, err4); err != nil {
		return nil, nil, err
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(
			fg.UnaryServer(shed),   // 1. shed low priorities near capacity
			fg.UnaryServer(conc),   // 2. cap requests in flight
			fg.UnaryServer(limits), // 3. hierarchical rate limits
		),
		grpc.ChainStreamInterceptor(fg.StreamServer(shed), fg.StreamServer(conc), fg.StreamServer(limits)),
	)
	handler := fg.HTTP(floodgate.Chain{shed, conc, limits})(mux)
	return srv, handler, nil
}

// snippet:end
