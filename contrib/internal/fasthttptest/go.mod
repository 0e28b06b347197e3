module github.com/lameduck/lameduck/contrib/internal/fasthttptest

go 1.26.0

require (
	github.com/lameduck/lameduck v0.0.0
	github.com/valyala/fasthttp v1.78.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/molecule-man/go-brrr v1.3.1 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
)

replace github.com/lameduck/lameduck => ../../..
