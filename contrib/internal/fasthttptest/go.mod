module github.com/lameduck/lameduck/contrib/internal/fasthttptest

go 1.26.0

require (
	github.com/jackc/pgx/v5 v5.12.0
	github.com/lameduck/lameduck v0.0.0
	github.com/valyala/fasthttp v1.78.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/molecule-man/go-brrr v1.3.1 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)

replace github.com/lameduck/lameduck => ../../..
