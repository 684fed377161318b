package limits

import (
	"context"

	"google.golang.org/grpc"
)

// AdmitUnary is the interceptor that admits unary calls as streams are
// (AdmitStream): counted against MaxStreamsPerConn, MaxStreams and the
// share cap while they run, and rate limited by StreamRate, so that a
// loop of unary calls (CSDS's FetchClientStatus, the Fetch* discovery
// RPCs) cannot do what a storm of streams may not; a call refused by
// authorization gives its token back. Exempt methods pass the rate and
// the caps. Chain it after the recovery.
func (l *Limits) AdmitUnary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		release, err := l.AdmitStream(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		resp, err := handler(ctx, req)
		release(Refused(err))
		return resp, err
	}
}
