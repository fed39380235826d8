package connectmw

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"

	"connectrpc.com/connect"

	"github.com/floodgate-go/floodgate/internal/seam"
)

// WrapStreamingClient applies interceptor.StreamClient's rules to a
// client's streams: a server stream (one request, a stream of responses)
// whose first Receive fails with a server delay is reopened and its
// request sent again; client and bidi streams are not retried (a denied
// stream's Send returns io.EOF, so the caller stops sending, and a replay
// would carry only what was sent so far), but under WithThrottle every
// stream is one request, refused by the throttle (its Send and Receive
// fail with the throttle's error) or answered by its first Receive.
func (c *client) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if err := c.r.Open(); err != nil {
			return &refusedConn{StreamingClientConn: conn, err: throttledError(err)}
		}
		if spec.StreamType != connect.StreamTypeServer {
			return &answeredConn{StreamingClientConn: conn, r: c.r}
		}
		return &serverStream{r: c.r, ctx: ctx, spec: spec, next: next, conn: conn, attempt: 1, pending: true}
	}
}

// forRetrier is err as the Retrier reads it: a Connect error with its gRPC
// status; nil for the normal end of a stream.
func forRetrier(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	if st, ok := grpcStatus(err); ok {
		return &statusError{err: err, st: st}
	}
	return err
}

// refusedConn is a stream the throttle did not send: nothing of it goes
// out, and every Send and Receive fails with err.
type refusedConn struct {
	connect.StreamingClientConn
	err error
}

func (c *refusedConn) Send(any) error               { return c.err }
func (c *refusedConn) Receive(any) error            { return c.err }
func (c *refusedConn) CloseRequest() error          { return nil }
func (c *refusedConn) CloseResponse() error         { return nil }
func (c *refusedConn) ResponseHeader() http.Header  { return http.Header{} }
func (c *refusedConn) ResponseTrailer() http.Header { return http.Header{} }

// answeredConn tells the throttle a client or bidi stream's first answer.
type answeredConn struct {
	connect.StreamingClientConn
	r    seam.Retrier
	once sync.Once
}

func (c *answeredConn) Receive(m any) error {
	err := c.StreamingClientConn.Receive(m)
	c.once.Do(func() { c.r.Answered(forRetrier(err)) })
	return err
}

// serverStream replays a server stream's single request when its first
// answer is a denial with a server delay.
type serverStream struct {
	r    seam.Retrier
	ctx  context.Context
	spec connect.Spec
	next connect.StreamingClientFunc

	mu   sync.Mutex // guards conn, which Receive replaces on a retry
	conn connect.StreamingClientConn

	// Send side (Send, CloseRequest): the request and whether it is
	// complete.
	sendMu sync.Mutex
	req    any
	closed bool

	// Receive side.
	received bool
	attempt  int
	pending  bool // the throttle awaits this attempt's first answer
}

func (s *serverStream) cur() connect.StreamingClientConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn
}

func (s *serverStream) Spec() connect.Spec          { return s.spec }
func (s *serverStream) Peer() connect.Peer          { return s.cur().Peer() }
func (s *serverStream) RequestHeader() http.Header  { return s.cur().RequestHeader() }
func (s *serverStream) ResponseHeader() http.Header { return s.cur().ResponseHeader() }
func (s *serverStream) ResponseTrailer() http.Header {
	return s.cur().ResponseTrailer()
}
func (s *serverStream) CloseResponse() error { return s.cur().CloseResponse() }

func (s *serverStream) Send(m any) error {
	s.sendMu.Lock()
	s.req = m
	s.sendMu.Unlock()
	return s.cur().Send(m)
}

func (s *serverStream) CloseRequest() error {
	s.sendMu.Lock()
	s.closed = true
	s.sendMu.Unlock()
	return s.cur().CloseRequest()
}

func (s *serverStream) Receive(m any) error {
	for {
		conn := s.cur()
		err := conn.Receive(m)
		if s.pending {
			s.pending = false
			s.r.Answered(forRetrier(err))
		}
		if err == nil {
			s.received = true
			return nil
		}
		s.sendMu.Lock()
		req, closed := s.req, s.closed
		s.sendMu.Unlock()
		rerr := forRetrier(err)
		if s.received || req == nil || !closed || rerr == nil || !s.r.Wait(s.ctx, s.attempt, rerr, trailer(err)) {
			return err
		}
		if oerr := s.r.Open(); oerr != nil {
			return throttledError(oerr)
		}
		s.attempt++
		if err := s.reopen(conn, req); err != nil {
			return err
		}
	}
}

// reopen replaces old with a new attempt carrying old's request headers
// (the new one's protocol headers kept) and sends req again.
func (s *serverStream) reopen(old connect.StreamingClientConn, req any) error {
	nc := s.next(s.ctx, s.spec)
	h := nc.RequestHeader()
	for k, v := range old.RequestHeader() {
		if _, set := h[k]; !set {
			h[k] = v
		}
	}
	_ = old.CloseResponse()
	s.mu.Lock()
	s.conn = nc
	s.mu.Unlock()
	s.pending = true
	if err := nc.Send(req); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nc.CloseRequest()
}
