# One static turnlog binary on a distroless base; the same image runs the
# manager (`turnlog manager`) and the workers (`turnlog worker ...`).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY agenthost/ agenthost/
COPY api/ api/
COPY cmd/ cmd/
COPY controllers/ controllers/
COPY internal/ internal/
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w" -o /out/turnlog ./cmd/turnlog

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/turnlog /turnlog
USER 65532:65532
ENTRYPOINT ["/turnlog"]
