package wsock

// A connection taken off a listening socket without net's accept.
//
// net's accept does, for every connection, accept4, setsockopt
// (TCP_NODELAY), getsockname and an epoll registration, and the close
// later an epoll removal. A connection the server answers at once and
// closes (a shed upgrade) needs none of that: a RawListener takes it as a
// bare non-blocking descriptor, ReadFD and SendLastFD answer it and
// CloseFD closes it. One that must be served after all becomes the
// connection net's accept would have returned (ConnFromFD).
