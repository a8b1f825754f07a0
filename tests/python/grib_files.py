"""GRIB2 files written by ecCodes (its wheels), for the tests of the ``grib`` parser.

``write_grib(path, fields)`` writes one message per field; a field is a dict with
``short`` (ecCodes' shortName), ``level_type`` (its typeOfLevel), ``level``, ``date``
(YYYYMMDD), ``hour``, ``step`` (hours), ``values`` (2-d, north to south, NaN where a
bitmap masks the point), and optionally ``packing`` (ecCodes' packingType). The grid is
regular latitude/longitude, 1 degree, from 60N 0E.

``noaa_index(path)`` writes the file's NOAA-style ``.idx`` inventory, as wgrib2 writes it
(``N:offset:d=YYYYMMDDHH:VAR:level:forecast:``), from the offsets ecCodes reports.

Run as a script, it writes the small file the Rust tests read
(tests/fixtures/files/small.grib2).
"""

from __future__ import annotations

import sys

import eccodes
import numpy as np

MISSING = 9999.0


def message(field) -> bytes:
    values = np.asarray(field["values"], dtype="float64")
    level_type = field.get("level_type", "surface")
    sample = "regular_ll_pl_grib2" if level_type == "isobaricInhPa" else "regular_ll_sfc_grib2"
    handle = eccodes.codes_grib_new_from_samples(sample)
    try:
        nj, ni = values.shape
        for key, value in [
            ("Ni", ni),
            ("Nj", nj),
            ("latitudeOfFirstGridPointInDegrees", 60.0),
            ("longitudeOfFirstGridPointInDegrees", 0.0),
            ("latitudeOfLastGridPointInDegrees", 60.0 - (nj - 1)),
            ("longitudeOfLastGridPointInDegrees", float(ni - 1)),
            ("iDirectionIncrementInDegrees", 1.0),
            ("jDirectionIncrementInDegrees", 1.0),
            ("dataDate", field.get("date", 20240101)),
            ("dataTime", field.get("hour", 0) * 100),
            ("step", field.get("step", 0)),
            ("typeOfLevel", level_type),
            ("level", field.get("level", 0)),
            ("shortName", field["short"]),
        ]:
            eccodes.codes_set(handle, key, value)
        if np.isnan(values).any():
            eccodes.codes_set(handle, "bitmapPresent", 1)
            eccodes.codes_set(handle, "missingValue", MISSING)
            values = np.where(np.isnan(values), MISSING, values)
        eccodes.codes_set(handle, "packingType", field.get("packing", "grid_simple"))
        eccodes.codes_set_values(handle, values.ravel())
        return eccodes.codes_get_message(handle)
    finally:
        eccodes.codes_release(handle)


def write_grib(path, fields) -> list[tuple[int, int]]:
    """Writes ``fields``, one message each; returns each message's (offset, length)."""
    places = []
    with open(path, "wb") as out:
        for field in fields:
            data = message(field)
            places.append((out.tell(), len(data)))
            out.write(data)
    return places


def noaa_index(path) -> str:
    """The file's wgrib2-style inventory, written beside it as ``<path>.idx``."""
    lines = []
    with open(path, "rb") as f:
        offset = 0
        number = 1
        while True:
            handle = eccodes.codes_grib_new_from_file(f)
            if handle is None:
                break
            try:
                date = eccodes.codes_get(handle, "dataDate")
                hour = eccodes.codes_get(handle, "dataTime") // 100
                name = eccodes.codes_get(handle, "shortName").upper()
                level = f"{eccodes.codes_get(handle, 'level')} {eccodes.codes_get(handle, 'typeOfLevel')}"
                step = eccodes.codes_get(handle, "step")
                lines.append(f"{number}:{offset}:d={date}{hour:02d}:{name}:{level}:{step} hour fcst:")
                offset += eccodes.codes_get(handle, "totalLength")
                number += 1
            finally:
                eccodes.codes_release(handle)
    text = "\n".join(lines) + "\n"
    with open(f"{path}.idx", "w") as out:
        out.write(text)
    return text


def small_fields():
    """Temperature on two pressure levels, 2 m temperature and surface pressure (with a
    bitmap: one point masked), at steps 0 and 6: the file the Rust tests read."""
    rng = np.random.default_rng(0)
    fields = []
    for step in (0, 6):
        for level in (850, 500):
            fields.append({"short": "t", "level_type": "isobaricInhPa", "level": level, "step": step,
                           "values": 250 + rng.random((5, 8)) * 30})
        fields.append({"short": "2t", "level_type": "heightAboveGround", "level": 2, "step": step,
                       "values": 280 + rng.random((5, 8)) * 10})
        masked = 100000 + rng.random((5, 8)) * 1000
        masked[1, 2] = np.nan
        fields.append({"short": "sp", "level_type": "surface", "step": step, "values": masked})
    return fields


if __name__ == "__main__":
    write_grib(sys.argv[1], small_fields())
