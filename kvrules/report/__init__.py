"""Human-readable reports of a plan: text tables, the short summary, the layout picture."""
