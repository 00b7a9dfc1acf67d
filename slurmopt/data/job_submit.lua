--[[
slurmopt job-submit plugin for Slurm's job_submit/lua (slurmctld loads
job_submit.lua from the directory of slurm.conf when JobSubmitPlugins=lua).

While slurmopt's heartbeat file is fresh and says enforce=1, a new job that
slurmopt manages and that asks for GPUs is held (priority 0, which
Slurm 22.05 shows as reason JobHeldUser, like --hold) and its comment is tagged
"slurmopt:managed,held[ | user comment]", so that the slurmopt daemon can
place it and release it.  A job is managed when its comment carries the
"slurmopt:" tag (written by `slurmopt submit`) or when one of its
partitions (the default partition when none is given) is listed on the
heartbeat's partitions= line ("*" lists every partition).

Everything else fails open: a missing, unreadable, garbled or stale
heartbeat, enforce=0, a heterogeneous job, a job without GPUs, or any Lua
error here, and the job passes through unchanged.  This plugin never
rejects a job.  A job the user submitted with --hold keeps its user hold:
it is tagged, but without the held marker, so the daemon never releases it.

Rendered by `slurmopt plugin install` (slurmopt/plugin.py), which bakes
the heartbeat path and its maximum age into the two placeholders below.
Unrendered, the path names no file, so the script passes every job
through.  See docs/plugin.md.
--]]

local HEARTBEAT_PATH = "@SLURMOPT_HEARTBEAT_PATH@"
local MAX_AGE_S = tonumber("@SLURMOPT_MAX_AGE_S@") or 30

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
    return { enforce = kv.enforce == "1", partitions = partitions }
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

-- The comment with slurmopt's tag: existing fields kept, "held" only when held here.
local function tagged_comment(comment, held)
    local fields, user = split_tag(comment)
    local out = { "managed" }
    for i = 2, #(fields or {}) do
        if fields[i] ~= HELD_FIELD then -- a copied or forged marker is never kept
            out[#out + 1] = fields[i]
        end
    end
    if held then
        out[#out + 1] = HELD_FIELD
    end
    local text = PREFIX .. table.concat(out, ",")
    if user ~= nil and user ~= "" then
        text = text .. SEPARATOR .. user
    end
    return text
end

local function slurmopt_submit(job_desc, part_list, submit_uid)
    local beat = read_heartbeat(HEARTBEAT_PATH, MAX_AGE_S, os.time())
    if beat == nil or not beat.enforce then
        return
    end
    local offset = job_desc.het_job_offset
    if offset ~= nil and offset ~= NO_VAL then
        return
    end
    if not job_asks_for_gpu(job_desc) then
        return
    end
    local comment = job_desc.comment
    local names = job_partitions(job_desc, part_list)
    if split_tag(comment) == nil and not in_managed_partition(names, beat.partitions) then
        return
    end
    local user_hold = job_desc.priority == 0
    local new_comment = tagged_comment(comment, not user_hold)
    -- Comment first: a job held without the marker would never be released.
    job_desc.comment = new_comment
    if user_hold then
        slurm.log_info("slurmopt: tagged user-held job %s of uid %d (partition %s), hold left to the user",
            tostring(job_desc.name), submit_uid, table.concat(names, ","))
        return
    end
    local ok = pcall(function() job_desc.priority = 0 end)
    if not ok then
        job_desc.comment = comment or ""
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
    tagged_comment = tagged_comment,
    submit = slurmopt_submit,
}
