--[[
slurmopt job-submit plugin for Slurm's job_submit/lua (slurmctld loads
job_submit.lua from the directory of slurm.conf when JobSubmitPlugins=lua).

slurmopt trusts only what a job's owner cannot edit.  The owner can change
a job's comment at any time, so the "slurmopt:" tag that `slurmopt submit`
writes there grants nothing by itself: at submission this plugin copies it
into the job's *admin comment* (which only administrators, SlurmUser and
this plugin can write; Slurm refuses an ordinary user's admin comment
before the plugin runs), keeping only the fields slurmopt knows
(preemptible, template, domain[=SEGMENT], and elastic=MIN:MAX capped at
the node count the job was submitted with) and dropping any forged "held" or "hb" field.

While slurmopt's heartbeat file is fresh and says enforce=1, a new job that
slurmopt manages and that asks for GPUs is also held (priority 0, which
Slurm shows as reason JobHeldUser) and its admin comment gets "held" and
"hb=SEQ", the heartbeat sequence read here, so the daemon can prove that
this plugin reads the very heartbeat it writes.  The daemon turns the hold
into an administrator's hold at its next cycle.  A job is managed when its
comment carries the "slurmopt:" tag or when one of its partitions (the
default partition when none is given) is listed on the heartbeat's
partitions= line ("*" lists every partition).

Everything else fails open: a missing, unreadable, garbled or stale
heartbeat, enforce=0, a heterogeneous job, a job without GPUs, or any Lua
error here, and the job is not held.  This plugin never rejects a job.  A
job the user submitted with --hold keeps its user hold: it is tagged, but
without the held marker, so the daemon never releases it.
slurm_job_modify changes nothing: rewriting the admin comment there would
make slurmctld refuse the owner's whole update.

Rendered by `slurmopt plugin install` (slurmopt/plugin.py), which bakes
the heartbeat path and its maximum age into the placeholders below.
Unrendered, the path names no file, so the script holds no job.  See
docs/plugin.md.
--]]

local HEARTBEAT_PATH = "@SLURMOPT_HEARTBEAT_PATH@"
-- Capped: a heartbeat older than an hour never counts as a daemon being there.
local MAX_AGE_S = math.min(tonumber("@SLURMOPT_MAX_AGE_S@") or 30, 3600)
local SLURMOPT_VERSION = "@SLURMOPT_VERSION@" -- the slurmopt that rendered this script

local PREFIX = "slurmopt:"
local SEPARATOR = " | "
local HELD_FIELD = "held"
local MAX_BYTES = 4096
-- Slurm's NO_VAL: het_job_offset of a job that is not part of a heterogeneous job
local NO_VAL = 4294967294

local function trim(s)
    return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

local function is_integer(s)
    return s ~= nil and s:match("^%-?%d+$") ~= nil
end

-- The heartbeat as {enforce=bool, partitions={name=true}}, or nil and why not.
-- Same rules as slurmopt.daemon.heartbeat.read_heartbeat (docs/config.md).
local function read_heartbeat(path, max_age, now)
    local f = io.open(path, "rb")
    if not f then
        return nil, "missing or unreadable"
    end
    local data = f:read(MAX_BYTES + 1)
    f:close()
    if not data then
        return nil, "empty"
    end
    if #data > MAX_BYTES then
        return nil, "oversized"
    end
    if data:find("[\128-\255]") then
        return nil, "not ASCII"
    end
    local kv = {}
    for line in data:gmatch("[^\n]+") do
        if trim(line) ~= "" and line:sub(1, 1) ~= "#" then
            local key, value = line:match("^([^=]*)=(.*)$")
            if not key then
                return nil, "not a key=value line"
            end
            kv[trim(key)] = trim(value)
        end
    end
    local version = kv.version or "1"
    if not is_integer(version) or tonumber(version) ~= 1 then
        return nil, "unsupported version"
    end
    if not is_integer(kv.time) or (kv.enforce ~= "0" and kv.enforce ~= "1") then
        return nil, "lacks time= or enforce="
    end
    if kv.pid ~= nil and not is_integer(kv.pid) then
        return nil, "bad pid"
    end
    if kv.seq ~= nil and not is_integer(kv.seq) then
        return nil, "bad seq"
    end
    if math.abs(now - tonumber(kv.time)) > max_age then
        return nil, "stale"
    end
    local partitions = {}
    for name in (kv.partitions or ""):gmatch("[^,]+") do
        name = trim(name)
        if name ~= "" then
            partitions[name] = true
        end
    end
    return { enforce = kv.enforce == "1", partitions = partitions, seq = kv.seq }
end

-- Whether one tres_per_* string ("gres:gpu:2,gres:shard:1", "gpu:a100:1") asks for a GPU.
local function asks_for_gpu(tres)
    if type(tres) ~= "string" then
        return false
    end
    for entry in tres:gmatch("[^,]+") do
        local parts = {}
        for part in trim(entry):gmatch("[^:=/]+") do
            parts[#parts + 1] = part
        end
        if parts[1] == "gres" or parts[1] == "tres" then
            table.remove(parts, 1)
        end
        if parts[1] == "gpu" then
            local count = tonumber(parts[#parts])
            if #parts == 1 or count == nil or count > 0 then
                return true
            end
        end
    end
    return false
end

local function job_asks_for_gpu(job_desc)
    return asks_for_gpu(job_desc.tres_per_node)
        or asks_for_gpu(job_desc.tres_per_job)
        or asks_for_gpu(job_desc.tres_per_task)
        or asks_for_gpu(job_desc.tres_per_socket)
end

-- The partitions a job asks for: its own list, else the default partition.
local function job_partitions(job_desc, part_list)
    local names = {}
    if job_desc.partition ~= nil and job_desc.partition ~= "" then
        for name in job_desc.partition:gmatch("[^,]+") do
            names[#names + 1] = trim(name)
        end
        return names
    end
    for name, part in pairs(part_list or {}) do
        if part.flag_default == 1 then
            names[#names + 1] = name
        end
    end
    return names
end

local function in_managed_partition(names, managed)
    if managed["*"] then
        return true
    end
    for _, name in ipairs(names) do
        if managed[name] then
            return true
        end
    end
    return false
end

-- The tag's fields and the user's comment, or nil when the comment is not tagged.
local function split_tag(comment)
    if comment == nil or comment:sub(1, #PREFIX) ~= PREFIX then
        return nil, comment
    end
    local rest = comment:sub(#PREFIX + 1)
    local body, user = rest, nil
    local at = rest:find(SEPARATOR, 1, true)
    if at then
        body = rest:sub(1, at - 1)
        user = rest:sub(at + #SEPARATOR)
    end
    local fields = {}
    for field in body:gmatch("[^,]+") do
        fields[#fields + 1] = field
    end
    if fields[1] ~= "managed" then
        return nil, comment -- not a valid tag: the whole comment is the user's
    end
    return fields, user
end

-- The node count the job was submitted with (-N): the most an elastic job may use.
local function submitted_nodes(job_desc)
    for _, n in ipairs({ job_desc.max_nodes, job_desc.min_nodes }) do
        if type(n) == "number" and n > 0 and n < NO_VAL then
            return math.floor(n)
        end
    end
    return 1
end

-- The admin-comment tag: the user's known fields, elastic capped, plus held and hb=SEQ.
local function admin_tag(comment, job_desc, held, seq)
    local fields = split_tag(comment) or {}
    local out = { "managed" }
    for i = 2, #fields do
        local key, value = fields[i]:match("^([%a][%w_-]*)=?(.*)$")
        if key == "preemptible" and value == "" then
            out[#out + 1] = "preemptible"
        elseif key == "template" and value:match("^[%w][%w_.-]*$") then
            out[#out + 1] = "template=" .. value
        elseif key == "domain" and value == "" then
            out[#out + 1] = "domain"
        elseif key == "domain" and value:match("^[1-9]%d?%d?%d?%d?%d?$") then
            out[#out + 1] = "domain=" .. value
        elseif key == "elastic" then
            local low, high = value:match("^(%d+):(%d+)$")
            low, high = tonumber(low), tonumber(high)
            if low and high then
                high = math.min(high, submitted_nodes(job_desc))
                if low >= 1 and low <= high then
                    out[#out + 1] = string.format("elastic=%d:%d", low, high)
                end
            end
        end -- held, hb, ckpt and unknown fields are never copied
    end
    if held then
        out[#out + 1] = HELD_FIELD
    end
    if seq ~= nil then
        out[#out + 1] = "hb=" .. seq
    end
    return PREFIX .. table.concat(out, ",")
end

local function slurmopt_submit(job_desc, part_list, submit_uid)
    local offset = job_desc.het_job_offset
    if offset ~= nil and offset ~= NO_VAL then
        return
    end
    if not job_asks_for_gpu(job_desc) then
        return
    end
    local beat = read_heartbeat(HEARTBEAT_PATH, MAX_AGE_S, os.time())
    local enforcing = beat ~= nil and beat.enforce
    local names = job_partitions(job_desc, part_list)
    local tagged = split_tag(job_desc.comment) ~= nil
    if not tagged and not (enforcing and in_managed_partition(names, beat.partitions)) then
        return
    end
    local hold = enforcing and job_desc.priority ~= 0
    local previous = job_desc.admin_comment
    local text = admin_tag(job_desc.comment, job_desc, hold, enforcing and beat.seq or nil)
    if previous ~= nil and previous ~= "" then
        text = text .. SEPARATOR .. previous
    end
    -- Admin comment first: a job held without the marker would never be released.
    job_desc.admin_comment = text
    if not hold then
        return
    end
    local ok = pcall(function() job_desc.priority = 0 end)
    if not ok then
        job_desc.admin_comment = previous or ""
        return
    end
    slurm.log_info("slurmopt: held job %s of uid %d (partition %s) for slurmopt",
        tostring(job_desc.name), submit_uid, table.concat(names, ","))
end

function slurm_job_submit(job_desc, part_list, submit_uid)
    local ok, err = pcall(slurmopt_submit, job_desc, part_list, submit_uid)
    if not ok then
        pcall(slurm.log_error, "slurmopt: job_submit.lua error, job passed through: %s",
            tostring(err))
    end
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end

-- For tests outside slurmctld (lua5.3 -e '...; dofile(path)'): the pure helpers.
slurmopt_plugin = {
    read_heartbeat = read_heartbeat,
    asks_for_gpu = asks_for_gpu,
    admin_tag = admin_tag,
    submit = slurmopt_submit,
}
