-- A sqlite3 shell workload for the real-program test.
create table t (id integer primary key, grp integer, name text, payload blob);
with recursive n(i) as (select 1 union all select i + 1 from n where i < 60000)
insert into t select i, (i * 7919) % 97, printf('name-%06d', (i * 104729) % 60000), zeroblob(i % 400) from n;
create index t_grp on t(grp, name);
select grp, count(*), sum(length(payload)), min(name), max(name) from t group by grp order by grp limit 10;
delete from t where id % 4 = 0;
update t set name = name || '-' || grp where id % 3 = 0;
select count(*), sum(length(name)), sum(length(payload)) from t;
select name from t where grp = 5 order by name desc limit 5;
vacuum;
select count(*) from t;
