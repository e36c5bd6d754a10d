"""One client interface (`Adapter`) implemented for chunkmq and every peer protocol."""
