# syntax=docker/dockerfile:1
# agentd: compiled with tsc in a build stage; the image runs `node dist/main.js` on production
# dependencies only (no tsx, esbuild or TypeScript), as the unprivileged user "node".
#   docker build -t agentd .
#   docker run -p 127.0.0.1:8080:8080 -v agentd-data:/data agentd           (embedded database in /data)
#   docker run -p 127.0.0.1:8080:8080 -e DATABASE_URL=postgres://… agentd    (PostgreSQL)
#
# Node 24 is an LTS line supported until April 2028 (Node 20 reached its end of life in April 2026;
# agentd refuses to start on it). Both stages use the same image, so what was built is what runs.

# ---- build: TypeScript → dist/ ----
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY . .
# web/ and openapi/ may be empty in a checkout (git keeps no empty folders); the runtime stage copies both.
# The console runs on the SDK's library build (served at /console/sdk/): built here, without the terminal client
RUN mkdir -p web openapi && npm run build && npm run build:lib -w @agentd/client

# ---- runtime ----
FROM node:24-bookworm-slim AS runtime
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8080 \
    AGENTD_DATA_DIR=/data
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
# the server finds migrations/, web/ and the SDK's build at ../../ from dist/store and dist/http, i.e.
# /app/migrations, /app/web, /app/clients/typescript/dist
COPY --from=build /app/dist ./dist
COPY --from=build /app/migrations ./migrations
COPY --from=build /app/web ./web
COPY --from=build /app/clients/typescript/dist ./clients/typescript/dist
COPY --from=build /app/openapi ./openapi
# the image's built-in unprivileged user "node" (uid 1000) owns the data volume
RUN mkdir -p /data && chown node:node /data
VOLUME /data
USER node
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||8080)+'/healthz').then(r=>process.exit(r.ok?0:1)).catch(()=>process.exit(1))"]
CMD ["node", "dist/main.js"]
