"""PTX text emission."""
