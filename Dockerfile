# One image with both binaries: `api` (check server) and `admin` (admin
# server, usage worker, operator CLI). The image has no shell: container
# health checks run `api healthcheck` / `admin healthcheck`.
FROM golang:1.26-bookworm AS build
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN for cmd in api admin; do \
      CGO_ENABLED=0 go build -trimpath -buildvcs=false \
        -ldflags="-s -w -X github.com/tollgate/tollgate/internal/buildinfo.Version=${VERSION}" \
        -o /out/$cmd ./cmd/$cmd || exit 1; \
    done

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/api /out/admin /usr/local/bin/
USER nonroot
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/api"]
