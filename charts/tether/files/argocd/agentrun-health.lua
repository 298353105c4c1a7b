-- Argo CD health of a Tether AgentRun (argocd-cm resource.customizations.health.tether.dev_AgentRun):
-- Progressing while Pending, Running or AwaitingApproval, Healthy once Succeeded, Degraded once
-- Failed; the message is the phase, the reason and the operator's message (operator/README.md,
-- "Conditions"). Base and table libraries only: Argo CD loads no others for custom scripts.
local hs = {status = "Progressing", message = "waiting for the Tether operator"}
local status = obj.status
if status == nil or status.observedGeneration ~= obj.metadata.generation then
  return hs -- a new run (observedGeneration -1) is never taken for done
end
local function condition(kind)
  for _, c in ipairs(status.conditions or {}) do
    if c.type == kind then
      return c
    end
  end
  return {}
end
-- "Pending (UnknownTool): waiting: ...", "Running: ...", "Failed (RetriesExhausted): ..."
local function describe(phase, c)
  local text = phase
  if c.reason ~= nil and c.reason ~= "" and c.reason ~= phase then
    text = text .. " (" .. c.reason .. ")"
  end
  if c.message ~= nil and c.message ~= "" then
    text = text .. ": " .. c.message
  end
  return text
end
local phase = status.phase
if phase == "Succeeded" then
  hs.status = "Healthy"
  hs.message = describe(phase, condition("Succeeded"))
elseif phase == "Failed" then
  hs.status = "Degraded"
  hs.message = describe(phase, condition("Failed"))
elseif phase == "Pending" or phase == "Running" or phase == "AwaitingApproval" then
  hs.message = describe(phase, condition("Reconciling"))
end
return hs
