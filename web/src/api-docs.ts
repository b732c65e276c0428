// The API docs page (/api/docs): Swagger UI, from the page's own files, on the app's OpenAPI
// document. A file of its own, not an inline script: the Content-Security-Policy allows none.
declare const SwaggerUIBundle: (options: Record<string, unknown>) => unknown;

SwaggerUIBundle({
  url: "/api/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  validatorUrl: null, // no badge fetched from validator.swagger.io
});

export {};
