"""Rows/s of the base-export SQL reader (spark_apps/base_export/rows.py) on a 100k-row Dumpling-shaped
file, against sqlglot parsing the same INSERT (why the reader has its own tokenizer)."""
import time, sys
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from spark_apps.base_export.rows import Converter, read_sql_rows
cols = [("id","bigint"),("name","varchar(64)"),("price","decimal(10,2)"),("data","varbinary(16)"),("created","datetime"),("note","text")]
rows = []
for i in range(100_000):
    rows.append(f"({i},'name {i} it\\'s',{i%1000}.25,x'{i:08x}','2026-11-20 10:00:00','line\\nnote {i}')")
sql = ("/*!40101 SET NAMES binary*/;\n" + "".join("INSERT INTO `t` VALUES\n" + ",\n".join(rows[j:j+2000]) + ";\n" for j in range(0, len(rows), 2000))).encode()
print("file MB", len(sql)/1e6)
conv = {("db","t"): Converter(cols)}
t=time.time(); n=sum(1 for _ in read_sql_rows([sql[i:i+(1<<20)] for i in range(0,len(sql),1<<20)], conv, "db")); dt=time.time()-t
print(f"regex tokenizer: {n} rows in {dt:.2f}s = {n/dt:,.0f} rows/s")
import sqlglot
from sqlglot import exp
small = ("INSERT INTO `t` VALUES\n" + ",\n".join(rows[:5000]) + ";").encode().decode()
t=time.time(); tree = sqlglot.parse_one(small, read="mysql"); vals=[[v.sql() for v in tup.expressions] for tup in tree.find(exp.Values).expressions]; dt=time.time()-t
print(f"sqlglot parse_one: {len(vals)} rows in {dt:.2f}s = {len(vals)/dt:,.0f} rows/s (100k rows would take ~{100_000/(len(vals)/dt):.0f}s)")
