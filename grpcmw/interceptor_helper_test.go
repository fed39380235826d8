package grpcmw_test

import "github.com/floodgate-go/floodgate/interceptor"

// mustInterceptor is interceptor.New for the tests: it panics with New's
// error.
func mustInterceptor(opts ...interceptor.Option) *interceptor.Interceptor {
	i, err := interceptor.New(opts...)
	if err != nil {
		panic(err)
	}
	return i
}
