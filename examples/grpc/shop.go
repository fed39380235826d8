package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/internal/shoppb"
)

// shop implements the Shop service; each call does some simulated work.
type shop struct {
	shoppb.UnimplementedShopServer
	work time.Duration
}

// wait does the simulated work, or gives up when the call ends.
func (s shop) wait(ctx context.Context) error {
	select {
	case <-time.After(s.work):
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// Login accepts the password "hunter2" for any user.
func (s shop) Login(ctx context.Context, req *shoppb.LoginRequest) (*shoppb.LoginReply, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	if req.GetUser() == "" || req.GetPassword() != "hunter2" {
		return nil, status.Error(codes.Unauthenticated, "wrong user or password")
	}
	return &shoppb.LoginReply{Token: "session-" + req.GetUser()}, nil
}

// Search returns two made-up items for the query.
func (s shop) Search(ctx context.Context, req *shoppb.SearchRequest) (*shoppb.SearchReply, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return &shoppb.SearchReply{Items: []string{req.GetQuery() + " (lamp)", req.GetQuery() + " (desk)"}}, nil
}

// ListItems streams limit items, one per unit of simulated work.
func (s shop) ListItems(req *shoppb.ListItemsRequest, stream grpc.ServerStreamingServer[shoppb.Item]) error {
	if req.GetLimit() < 1 || req.GetLimit() > 100 {
		return status.Errorf(codes.InvalidArgument, "limit %d is outside 1..100", req.GetLimit())
	}
	for i := range req.GetLimit() {
		if err := s.wait(stream.Context()); err != nil {
			return err
		}
		id := strconv.Itoa(int(i) + 1)
		if err := stream.Send(&shoppb.Item{Id: id, Name: "item " + id}); err != nil {
			return err
		}
	}
	return nil
}

// Pay accepts any positive amount.
func (s shop) Pay(ctx context.Context, req *shoppb.PayRequest) (*shoppb.PayReply, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	if req.GetAmountCents() <= 0 {
		return nil, status.Errorf(codes.InvalidArgument, "amount_cents %d must be positive", req.GetAmountCents())
	}
	return &shoppb.PayReply{PaymentId: fmt.Sprintf("pay_%d", time.Now().UnixNano())}, nil
}
