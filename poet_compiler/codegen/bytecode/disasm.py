"""The disassembler: header figures and one line per instruction (``poetc inspect``)."""

from __future__ import annotations

from typing import Any

from poet_compiler.codegen.bytecode.decode import decode
from poet_compiler.codegen.bytecode.format import DecodedProgram
from poet_compiler.schedule.program import Op


def header_figures(decoded: DecodedProgram) -> dict[str, Any]:
    """Key figures of a decoded file, for printing."""
    p = decoded.program
    total = decoded.sections.get("total", 0)
    return {
        "version": decoded.version,
        "flags": "|".join(decoded.flag_names()) or "-",
        "crc32": f"0x{decoded.crc:08x}",
        "file_bytes": total,
        "nodes": p.n_nodes,
        "instructions": len(p),
        "compute": p.n_compute, "recompute": p.n_recompute,
        "page_out": p.n_page_out, "page_in": p.n_page_in,
        "free": p.count(Op.FREE), "fence": p.count(Op.FENCE), "move": p.count(Op.MOVE),
        "arena_bytes": p.arena_bytes,
        "bytes_per_instruction": round(total / len(p), 3) if len(p) else 0.0,
        **{f"section_{k}_bytes": v for k, v in decoded.sections.items() if k != "total"},
    }


def disassemble(data: bytes) -> str:
    """Human-readable listing: header figures, then one line per instruction."""
    decoded = decode(data)
    figs = header_figures(decoded)
    lines = [f"; .poet v{figs['version']}  flags {figs['flags']}  crc {figs['crc32']}  {figs['file_bytes']} B"
             + (f"  graph {decoded.graph_name!r}" if decoded.graph_name is not None else "")]
    lines.append(f"; nodes {figs['nodes']}  instructions {figs['instructions']}  "
                 f"arena {figs['arena_bytes'] if figs['arena_bytes'] is not None else '-'} B  "
                 f"{figs['bytes_per_instruction']} B/instruction")
    lines.append("; sections: " + ", ".join(f"{k} {v} B" for k, v in decoded.sections.items() if k != "total"))
    lines.append(f"; compute {figs['compute']} (recompute {figs['recompute']})  free {figs['free']}  "
                 f"page_out {figs['page_out']}  page_in {figs['page_in']}  fence {figs['fence']}"
                 + (f"  move {figs['move']}" if figs["move"] else ""))
    for k, ins in enumerate(decoded.program):
        text = str(ins)
        if ins.op is not Op.FENCE:
            if decoded.sizes is not None:
                text += f" ({decoded.sizes[ins.node]} B)"
            if decoded.nodes is not None:
                text += f"  ; {decoded.nodes[ins.node].name}"
        lines.append(f"{k:6d}  {text}")
    return "\n".join(lines) + "\n"
