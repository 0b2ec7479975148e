import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { ApiError } from "./api/client";
import { App } from "./App";
import { adoptTokenFromUrl } from "./settings";
import "./styles.css";

// Before the router reads the fragment: a start-up link's `#token=…` becomes the stored admin token.
adoptTokenFromUrl();

const client = new QueryClient({
  defaultOptions: {
    queries: {
      // A refused token or a missing route will not fix itself on retry.
      retry: (count, error) => !(error instanceof ApiError && [400, 401, 403, 404, 501].includes(error.status)) && count < 1,
      staleTime: 2_000,
      // A hidden tab polls nothing (the intervals wait for the tab to be visible again, when every stale query
      // refetches at once); an idle visible tab polls, and the server answers 304 while nothing changed.
      refetchIntervalInBackground: false,
      refetchOnWindowFocus: true,
    },
  },
});

createRoot(document.getElementById("root")!).render(
  <StrictMode>
    <QueryClientProvider client={client}>
      <App />
    </QueryClientProvider>
  </StrictMode>,
);
