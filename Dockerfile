# The lameduck demo as a container image: a static binary on a distroless base, running as non-root.
#
#   docker build -t lameduck-demo:0.1.0 .
#   docker run --rm -p 8080:8080 lameduck-demo:0.1.0            # runs `lameduck demo --addr=:8080`
#
# deploy/helm/lameduck-demo and deploy/k8s/ expect this image (docs/deploying.md).

# Build stage: the Go toolchain the repository asks for (go 1.26).
FROM golang:1.26 AS build
WORKDIR /src
# The command's own module, with its replace directives pointing at the core (../..) and the contrib modules it
# imports: built without go.work, so the image needs only those modules. Downloads and the build cache live in
# BuildKit cache mounts, kept between builds.
ENV GOWORK=off CGO_ENABLED=0
COPY . .
# CGO_ENABLED=0: a static binary that needs no libc, so it runs on distroless/static.
ARG TARGETOS=linux
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    cd cmd/lameduck && \
    GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -buildvcs=false -ldflags='-s -w' -o /out/lameduck . && \
    /out/lameduck --help >/dev/null

# Run stage: no shell, no package manager, user 65532 ("nonroot"). A preStop `exec: sleep` cannot run here:
# use the HTTP hook, GET /prestop (docs/probes-and-shutdown.md).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/lameduck /lameduck
USER 65532:65532
EXPOSE 8080
# The exec form: the binary is PID 1 and receives the kubelet's SIGTERM itself (a shell would not forward it).
ENTRYPOINT ["/lameduck"]
CMD ["demo", "--addr=:8080", "--log-format=json"]
