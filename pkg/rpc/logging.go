package rpc

import (
	"context"

	"github.com/go-logr/logr"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
)

// logrAdapter routes the middleware's call logs to logr. Debug maps to V(1)
// so successful calls on the hot path stay quiet at the default level.
func logrAdapter(log logr.Logger) logging.Logger {
	return logging.LoggerFunc(func(_ context.Context, lvl logging.Level, msg string, fields ...any) {
		switch {
		case lvl >= logging.LevelError:
			log.Error(nil, msg, fields...)
		case lvl <= logging.LevelDebug:
			log.V(1).Info(msg, fields...)
		default:
			log.Info(msg, fields...)
		}
	})
}

// loggingOptions logs each call once, when it finishes, with the trace id
// so a log line leads to its trace.
func loggingOptions(codeToLevel logging.CodeToLevel) []logging.Option {
	return []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithLevels(codeToLevel),
		logging.WithFieldsFromContext(traceFields),
	}
}

func traceFields(ctx context.Context) logging.Fields {
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		return logging.Fields{"traceID", sc.TraceID().String()}
	}
	return nil
}

// serverCodeToLevel keeps successful calls at debug: a busy admitter
// serves hundreds of calls a second.
func serverCodeToLevel(c codes.Code) logging.Level {
	if c == codes.OK {
		return logging.LevelDebug
	}
	return logging.DefaultServerCodeToLevel(c)
}
