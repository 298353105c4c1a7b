-- Argo CD health of a Tether AgentTool (argocd-cm resource.customizations.health.tether.dev_AgentTool):
-- Healthy when Ready, Degraded when Stalled (it cannot be a tool until its spec changes),
-- Progressing while Reconciling (a Secret it names is missing); the message is the reason and
-- the operator's message (operator/README.md, "Conditions"). Base and table libraries only:
-- Argo CD loads no others for custom scripts.
local hs = {status = "Progressing", message = "waiting for the Tether operator"}
local status = obj.status
if status == nil or status.observedGeneration ~= obj.metadata.generation then
  return hs
end
local found = {}
for _, c in ipairs(status.conditions or {}) do
  found[c.type] = c
end
local function describe(c)
  local text = c.reason or c.type
  if c.message ~= nil and c.message ~= "" then
    text = text .. ": " .. c.message
  end
  return text
end
if found.Stalled ~= nil and found.Stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(found.Stalled)
elseif found.Ready ~= nil and found.Ready.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(found.Ready)
elseif found.Reconciling ~= nil and found.Reconciling.status == "True" then
  hs.message = describe(found.Reconciling)
end
return hs
