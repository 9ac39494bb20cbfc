// A service worker that caches nothing: the page always talks to the server it came from.
self.addEventListener("install", () => self.skipWaiting());
