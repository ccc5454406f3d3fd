package admithttp

import "net/http"

// statusWriter records the status the handler answers with, for DropOn5xx.
type statusWriter struct {
	http.ResponseWriter
	status int // the final (>= 200) status; 0 until one is written
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush keeps streaming handlers working behind the wrapper.
func (s *statusWriter) Flush() {
	_ = http.NewResponseController(s.ResponseWriter).Flush() // http.Flusher reports no error either
}

// Unwrap lets http.ResponseController reach the server's writer (Hijack,
// deadlines, full-duplex).
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
