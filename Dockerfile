# One image with both binaries: `api` (check server) and `admin` (admin
# server, usage worker, operator CLI).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/api ./cmd/api \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/admin ./cmd/admin

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/api /out/admin /usr/local/bin/
USER nonroot
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/api"]
